// Hostile EtcdCluster / EtcdBackup / EtcdRestore objects, generated from a seed: each starts from a
// valid object and breaks it in a few ways at once: wrong types, huge or negative numbers, strings
// far over any limit, shell metacharacters (with a marker command, so a string that ever reached a
// shell would leave a file behind), newlines, names at and past the 253-character limit, conflicting
// fields. The same seed gives the same objects.
import type { Chooser } from "./random.ts";

export type Kind = "EtcdCluster" | "EtcdBackup" | "EtcdRestore";

export interface HostileObject {
  kind: Kind;
  name: string;
  body: Record<string, unknown>;
  /** What was done to it, for the test's messages. */
  mutations: string[];
}

/** Shell payloads that would create `marker` if any string reached a shell unquoted. */
export function shellPayloads(marker: string): string[] {
  return [
    `$(touch ${marker})`,
    `\`touch ${marker}\``,
    `; touch ${marker}`,
    `x && touch ${marker}`,
    `x | touch ${marker}`,
    `x\ntouch ${marker}\n`,
    `'; touch ${marker}; '`,
    `"; touch ${marker}; "`,
    `\${IFS}touch\${IFS}${marker}`,
    `$(touch\t${marker})#`,
  ];
}

const GROUP_VERSION = "etcd.database.coreos.com/v1beta2";

function validBase(kind: Kind, name: string): Record<string, unknown> {
  const metadata = { name };
  switch (kind) {
    case "EtcdCluster":
      return {
        apiVersion: GROUP_VERSION,
        kind,
        metadata,
        spec: {
          size: 3,
          version: "3.6.16",
          repository: "quay.io/coreos/etcd",
          paused: false,
          pod: {
            labels: { team: "a" },
            annotations: { note: "a" },
            nodeSelector: { disk: "ssd" },
            busyboxImage: "busybox:1.28.0-glibc",
            ClusterDomain: ".cluster.local",
            DNSTimeoutInSecond: 10,
            etcdEnv: [{ name: "GOMAXPROCS", value: "2" }],
            etcdArgs: ["--log-level=warn"],
            priorityClassName: "low",
            antiAffinity: false,
          },
        },
      };
    case "EtcdBackup":
      return {
        apiVersion: GROUP_VERSION,
        kind,
        metadata,
        spec: {
          etcdEndpoints: ["http://steady-client:2379"],
          storageType: "S3",
          s3: { path: "bucket/key", awsSecret: "aws", endpoint: "http://127.0.0.1:1", forcePathStyle: true },
          backupPolicy: { timeoutInSecond: 10, backupIntervalInSecond: 0, maxBackups: 1 },
        },
      };
    case "EtcdRestore":
      return {
        apiVersion: GROUP_VERSION,
        kind,
        metadata,
        spec: {
          etcdCluster: { name },
          backupStorageType: "S3",
          s3: { path: "bucket/key", awsSecret: "aws", endpoint: "http://127.0.0.1:1", forcePathStyle: true },
        },
      };
  }
}

/** Paths (under the object) of every string field a user sets, per kind. */
const STRING_FIELDS: Record<Kind, string[][]> = {
  EtcdCluster: [
    ["spec", "version"],
    ["spec", "repository"],
    ["spec", "pod", "busyboxImage"],
    ["spec", "pod", "ClusterDomain"],
    ["spec", "pod", "priorityClassName"],
    ["spec", "pod", "labels", "team"],
    ["spec", "pod", "annotations", "note"],
    ["spec", "pod", "nodeSelector", "disk"],
    ["spec", "pod", "etcdEnv", "0", "name"],
    ["spec", "pod", "etcdEnv", "0", "value"],
    ["spec", "pod", "etcdArgs", "0"],
  ],
  EtcdBackup: [
    ["spec", "etcdEndpoints", "0"],
    ["spec", "storageType"],
    ["spec", "s3", "path"],
    ["spec", "s3", "awsSecret"],
    ["spec", "s3", "endpoint"],
    ["spec", "clientTLSSecret"],
  ],
  EtcdRestore: [
    ["spec", "backupStorageType"],
    ["spec", "s3", "path"],
    ["spec", "s3", "awsSecret"],
    ["spec", "s3", "endpoint"],
  ],
};

const NUMBER_FIELDS: Record<Kind, string[][]> = {
  EtcdCluster: [
    ["spec", "size"],
    ["spec", "pod", "DNSTimeoutInSecond"],
  ],
  EtcdBackup: [
    ["spec", "backupPolicy", "timeoutInSecond"],
    ["spec", "backupPolicy", "backupIntervalInSecond"],
    ["spec", "backupPolicy", "maxBackups"],
  ],
  EtcdRestore: [],
};

const HUGE_NUMBERS: readonly unknown[] = [
  2 ** 31,
  2 ** 53,
  9.9e307,
  -1,
  -(2 ** 31),
  0,
  1.5,
  "3",
  "1e9",
  true,
  null,
  [],
  {},
];
const WRONG_TYPES: readonly unknown[] = [null, 42, true, [], {}, ["a"], { a: 1 }, 1.25];

function setPath(object: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let cursor: Record<string, unknown> = object;
  for (const [i, key] of path.entries()) {
    if (i === path.length - 1) {
      cursor[key] = value;
      return;
    }
    const next = cursor[key];
    if (typeof next !== "object" || next === null) {
      const created: Record<string, unknown> = {};
      cursor[key] = created;
      cursor = created;
    } else {
      cursor = next as Record<string, unknown>;
    }
  }
}

/** A name for the object: usually a plain unique one, sometimes at or past the limits. */
function hostileName(rand: Chooser, index: number, marker: string): { name: string; mutation?: string } {
  const plain = `fz${index}-${Math.floor(rand.next() * 1e6)}`;
  switch (rand.int(8)) {
    case 0:
      // 253 characters: the longest valid object name. Pods and Services derived from it would not be.
      return {
        name: `${plain}-${"a".repeat(252 - plain.length)}`.slice(0, 253),
        mutation: "name of 253 characters",
      };
    case 1:
      return { name: `${plain}-${"b".repeat(260)}`.slice(0, 254), mutation: "name of 254 characters" };
    case 2:
      return {
        name: `${plain}$(touch-${marker.replace(/\//g, "")})`,
        mutation: "metacharacters in the name",
      };
    case 3:
      return { name: `${plain.toUpperCase()}_X`, mutation: "upper case and _ in the name" };
    default:
      return { name: plain };
  }
}

function hostileString(rand: Chooser, marker: string): string {
  switch (rand.int(6)) {
    case 0:
      return "x".repeat(rand.pick([254, 4097, 70_000]));
    case 1:
      return `${rand.pick(shellPayloads(marker))}${"y".repeat(rand.int(3) * 300)}`;
    case 2:
      return "line1\nline2\r\n\u0000\u0007";
    default:
      return rand.pick(shellPayloads(marker));
  }
}

/** Conflicting or contradictory fields: each valid on its own, not together. */
function conflict(kind: Kind, body: Record<string, unknown>, rand: Chooser, marker: string): string {
  const payload = rand.pick(shellPayloads(marker));
  switch (kind) {
    case "EtcdCluster":
      switch (rand.int(4)) {
        case 0:
          setPath(body, ["spec", "pod", "etcdArgs"], [`--data-dir=${payload}`]);
          return "etcdArgs sets a flag the operator owns";
        case 1:
          setPath(body, ["spec", "pod", "etcdEnv"], [{ name: "ETCD_NAME", value: payload }]);
          return "etcdEnv sets a variable the operator owns";
        case 2:
          setPath(body, ["spec", "TLS"], {
            static: { member: { peerSecret: payload, serverSecret: payload } },
          });
          return "TLS with secrets that cannot be names";
        default:
          setPath(body, ["spec", "pod", "etcdArgs"], ["--log-level=warn", `--log-level=${payload}`]);
          return "etcdArgs sets a flag twice";
      }
    case "EtcdBackup":
      switch (rand.int(3)) {
        case 0:
          setPath(body, ["spec", "oss"], { path: `b/${payload}`, ossSecret: "oss" });
          return "storageType S3 with an oss section too";
        case 1:
          setPath(body, ["spec", "storageType"], "OSS");
          return "storageType OSS with only an s3 section";
        default:
          setPath(body, ["spec", "backupPolicy", "maxBackups"], 5);
          setPath(body, ["spec", "backupPolicy", "backupIntervalInSecond"], 0);
          return "maxBackups without an interval";
      }
    case "EtcdRestore":
      switch (rand.int(2)) {
        case 0:
          setPath(body, ["spec", "etcdCluster", "name"], `other-${payload}`);
          return "etcdCluster.name differs from metadata.name";
        default:
          setPath(body, ["spec", "backupStorageType"], "OSS");
          return "backupStorageType OSS with an s3 section";
      }
  }
}

/**
 * The `index`-th hostile object of `kind`. `restoreName` fixes an EtcdRestore's name (it must name a
 * cluster; the fuzzer points them at its running cluster, whose restore must fail before touching it).
 */
export function hostileObject(
  rand: Chooser,
  kind: Kind,
  index: number,
  marker: string,
  restoreName?: string,
): HostileObject {
  const mutations: string[] = [];
  const named =
    kind === "EtcdRestore" && restoreName ? { name: restoreName } : hostileName(rand, index, marker);
  if ("mutation" in named && named.mutation) mutations.push(named.mutation);
  const body = validBase(kind, named.name);
  const count = 1 + rand.int(3);
  for (let i = 0; i < count; i++) {
    const what = rand.int(4);
    const strings = STRING_FIELDS[kind];
    const numbers = NUMBER_FIELDS[kind];
    if (what === 0 && numbers.length > 0) {
      const path = rand.pick(numbers);
      const value = rand.pick(HUGE_NUMBERS);
      setPath(body, path, value);
      mutations.push(`${path.join(".")} = ${JSON.stringify(value)}`);
    } else if (what === 1) {
      const path = rand.pick(strings);
      const value = rand.pick(WRONG_TYPES);
      setPath(body, path, value);
      mutations.push(`${path.join(".")} = ${JSON.stringify(value)}`);
    } else if (what === 2) {
      mutations.push(conflict(kind, body, rand, marker));
    } else {
      const path = rand.pick(strings);
      const value = hostileString(rand, marker);
      setPath(body, path, value);
      mutations.push(
        `${path.join(".")} = ${JSON.stringify(value.length > 60 ? `${value.slice(0, 40)}…(${value.length})` : value)}`,
      );
    }
  }
  return { kind, name: named.name, body, mutations };
}

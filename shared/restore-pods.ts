// The seed member of a restore: an ordinary member pod with init containers in front of etcd,
// which turn a backup object into its data dir before etcd starts:
//   1. fetch-backup (operator image): download the object and prove its bytes: the SHA-256 the
//      backup recorded when the operator passes it, else etcd's trailer (a bad backup exits 3);
//   2. restore-snapshot (the cluster's etcd image): `etcdutl snapshot restore` into a staging dir,
//      with the new member's name, peer URL and a cluster token of its own. It skips its own hash
//      pass: step 1 proved the bytes (each check is a pass over GiBs);
//   3. install-data-dir (operator image): move the staging dir into place unless a data dir is
//      there already (a re-run after the member took writes must not roll them back);
//   4. await-start (operator image), when the seeds are prepared while the old members still
//      serve: etcd starts only once the operator, having seen the old members gone, says so.
// The credentials reach the pod as a Secret volume, never as plain env values.
// Every step runs as the user etcd will run as (see initContainerUser): etcdutl makes the restored
// data dir 0700, so a step running as anyone else can neither see into it nor move it.
import type {
  V1Container,
  V1EnvVar,
  V1Pod,
  V1PodSecurityContext,
  V1SecurityContext,
} from "@kubernetes/client-node";
import type { BackupStorageType } from "./api/etcd-backup.ts";
import { DATA_DIR } from "./member-pods.ts";
import { secretOf } from "./object-store/storages.ts";
import { SECRET_DIR, SNAPSHOT_FILE, STAGING_DATA_DIR } from "./restore-paths.ts";

const SECRET_VOLUME = "backup-secret";
/** The init container that holds etcd back until the operator opens the gate. */
export const START_GATE_CONTAINER = "await-start";
/** The init container that fetches the backup: once it succeeded, the bytes are proven. */
export const FETCH_CONTAINER = "fetch-backup";
/** Where the operator image (Dockerfile, distroless Node) has node; it is not on PATH there. */
export const OPERATOR_IMAGE_NODE = "/nodejs/bin/node";

/**
 * V8 flags for the fetch, which streams the whole backup through 64 KiB Buffers. By default V8
 * holds their memory to its own 64 MiB external-memory limit and runs a mark-compact each time it
 * is reached: 43–60 of them per 1.2 GiB, half the fetch's user CPU (2.5–2.9 s against 1.3–1.6 with
 * the flag, which counts that memory in the heap's overall limit instead). The price is a higher
 * peak: 191–204 MiB of RSS against 163–167, for the seconds the fetch runs.
 */
export const FETCH_NODE_FLAGS = ["--external-memory-accounted-in-global-limit"] as const;

/** The command of an init container that runs one step of infra/restore-init.ts from the operator image. */
function initCommand(step: "fetch" | "install" | "await-start"): string[] {
  const flags = step === "fetch" ? FETCH_NODE_FLAGS : [];
  return [OPERATOR_IMAGE_NODE, ...flags, "/app/infra/restore-init.ts", step];
}

/** The operator image's user (the Dockerfile's USER, distroless's "nonroot"). */
export const OPERATOR_IMAGE_USER = 65532;

/**
 * The user each init container of a restored seed runs as, so that all of them and etcd share
 * the data dir they hand on: nothing when the pod names its user (it applies to every container);
 * the operator image's user for etcdutl when the pod only asks for a non-root one (etcd then runs
 * as its image's non-root user and can read a data dir of another non-root user only if they are
 * the same, as in distroless images); else root for the operator's steps, as the etcd images run,
 * which can also write to a persistent volume's root-owned directory.
 */
function initContainerUser(pod: V1PodSecurityContext | undefined): {
  operatorSteps?: V1SecurityContext;
  etcdutl?: V1SecurityContext;
} {
  if (pod?.runAsUser !== undefined) return {};
  if (pod?.runAsNonRoot) {
    return { etcdutl: { runAsUser: OPERATOR_IMAGE_USER, runAsGroup: OPERATOR_IMAGE_USER } };
  }
  return { operatorSteps: { runAsUser: 0, runAsGroup: 0 } };
}

/** A snapshot streamed from a surviving member (quorum-loss recovery), no object store involved. */
export interface MemberSource {
  storageType: "Member";
  /** e.g. "http://10.78.0.7:2379" */
  endpoint: string;
  /** With client TLS: the operator's client certificate Secret, mounted into the fetch container. */
  tls?: { secretName: string; keys: { cert: string; key: string; ca: string }; serverName: string };
}

/** Where the fetch container finds the operator's client certificate (client.crt, client.key, ca.crt). */
export const OPERATOR_TLS_DIR = "/etc/etcd-operator-tls";
const OPERATOR_TLS_VOLUME = "operator-tls";

export interface RestoreSource {
  storageType: BackupStorageType;
  /**
   * The restore's storage section (s3, abs, gcs or oss) with its path naming the very object to
   * restore ("<bucket>/<key>"); the fetch container opens the store from it as the operator does.
   */
  section: Record<string, unknown>;
  /**
   * Checked by the fetch container when the backup's metadata recorded it: the CRC-32 when there
   * is one (cheaper), else the SHA-256, else etcd's trailer.
   */
  sha256?: string;
  crc32?: string;
  /** The size the backup's metadata recorded, checked by the fetch container too. */
  size?: number;
}

export interface RestoreSeedInput {
  /** The seed member's pod, as for any new member. */
  pod: V1Pod;
  source: RestoreSource | MemberSource;
  operatorImage: string;
  etcdImage: string;
  memberName: string;
  peerURL: string;
  /**
   * Every member restored from the same snapshot at once (this one included), as etcd's disaster
   * recovery does it; default: this member alone (the others are added afterwards).
   */
  initialCluster?: { name: string; peerURL: string }[];
  /** A token no old member shares, so none of them can talk to the restored cluster. */
  clusterToken: string;
  /**
   * Hold etcd back until the operator opens the gate with this token (seeds prepared while the
   * old members still serve); without it etcd starts as soon as its data dir is in place.
   */
  startToken?: string;
}

function env(values: Record<string, string | undefined>): V1EnvVar[] {
  return Object.entries(values)
    .filter((entry): entry is [string, string] => entry[1] !== undefined && entry[1] !== "")
    .map(([name, value]) => ({ name, value }));
}

function fetchContainer(
  source: RestoreSource | MemberSource,
  operatorImage: string,
  securityContext: V1SecurityContext | undefined,
): V1Container {
  const dataMount = { name: "etcd-data", mountPath: "/var/etcd" };
  const command = initCommand("fetch");
  if (source.storageType === "Member") {
    return {
      name: "fetch-snapshot",
      image: operatorImage,
      command,
      securityContext,
      env: env({
        STORAGE_TYPE: "Member",
        MEMBER_ENDPOINT: source.endpoint,
        OPERATOR_TLS_DIR: source.tls ? OPERATOR_TLS_DIR : undefined,
        MEMBER_SERVER_NAME: source.tls?.serverName,
      }),
      volumeMounts: source.tls
        ? [dataMount, { name: OPERATOR_TLS_VOLUME, mountPath: OPERATOR_TLS_DIR, readOnly: true }]
        : [dataMount],
    };
  }
  const secret = secretOf(source.storageType, source.section);
  return {
    name: FETCH_CONTAINER,
    image: operatorImage,
    command,
    securityContext,
    env: env({
      STORAGE_TYPE: source.storageType,
      STORAGE_SECTION: JSON.stringify(source.section),
      SECRET_DIR: secret === undefined ? undefined : SECRET_DIR,
      EXPECT_SHA256: source.sha256,
      EXPECT_CRC32: source.crc32,
      EXPECT_SIZE: source.size === undefined ? undefined : String(source.size),
    }),
    volumeMounts:
      secret === undefined
        ? [dataMount]
        : [dataMount, { name: SECRET_VOLUME, mountPath: SECRET_DIR, readOnly: true }],
  };
}

export function restoreSeedPod(input: RestoreSeedInput): V1Pod {
  const { source } = input;
  const dataMount = { name: "etcd-data", mountPath: "/var/etcd" };
  const spec = input.pod.spec ?? { containers: [] };
  const users = initContainerUser(spec.securityContext);
  const restore: V1Container = {
    name: "restore-snapshot",
    image: input.etcdImage,
    command: [
      "/usr/local/bin/etcdutl",
      "snapshot",
      "restore",
      SNAPSHOT_FILE,
      `--name=${input.memberName}`,
      `--initial-cluster=${(input.initialCluster ?? [{ name: input.memberName, peerURL: input.peerURL }])
        .map((m) => `${m.name}=${m.peerURL}`)
        .join(",")}`,
      `--initial-advertise-peer-urls=${input.peerURL}`,
      `--initial-cluster-token=${input.clusterToken}`,
      `--data-dir=${STAGING_DATA_DIR}`,
      // The fetch proved the bytes (a member's snapshot by its trailer, a backup by its recorded
      // SHA-256 or its trailer). Still strips the trailer; it only skips a second SHA-256 pass.
      "--skip-hash-check",
    ],
    securityContext: users.etcdutl,
    volumeMounts: [dataMount],
  };
  const install: V1Container = {
    name: "install-data-dir",
    image: input.operatorImage,
    command: initCommand("install"),
    securityContext: users.operatorSteps,
    env: env({ DATA_DIR }),
    volumeMounts: [dataMount],
  };
  const gate: V1Container[] = input.startToken
    ? [
        {
          name: START_GATE_CONTAINER,
          image: input.operatorImage,
          command: initCommand("await-start"),
          securityContext: users.operatorSteps,
          env: env({ START_TOKEN: input.startToken }),
          volumeMounts: [dataMount],
        },
      ]
    : [];
  const storeSecret =
    source.storageType === "Member" ? undefined : secretOf(source.storageType, source.section);
  const secretVolumes =
    source.storageType !== "Member"
      ? storeSecret === undefined
        ? []
        : [{ name: SECRET_VOLUME, secret: { secretName: storeSecret } }]
      : source.tls
        ? [
            {
              name: OPERATOR_TLS_VOLUME,
              secret: {
                secretName: source.tls.secretName,
                items: [
                  { key: source.tls.keys.cert, path: "client.crt" },
                  { key: source.tls.keys.key, path: "client.key" },
                  { key: source.tls.keys.ca, path: "ca.crt" },
                ],
              },
            },
          ]
        : [];
  return {
    ...input.pod,
    spec: {
      ...spec,
      initContainers: [
        fetchContainer(source, input.operatorImage, users.operatorSteps),
        restore,
        install,
        ...gate,
      ],
      volumes: [...(spec.volumes ?? []), ...secretVolumes],
    },
  };
}

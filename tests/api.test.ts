// Unit tests of the v1beta2 API: defaults and normalization, a readable problem for every kind of bad
// input, the TypeBox → CRD conversion, and the committed CRD files matching the generator.
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Type } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import tap from "tap";
import { parse } from "yaml";
import { CRD_DIR, crdFiles, crdManifests, staleCrdFiles, toStructural } from "../infra/crds.ts";
import { EtcdBackupSpecSchema, EtcdBackupStatusSchema } from "../shared/api/etcd-backup.ts";
import {
  EtcdClusterSpecSchema,
  EtcdClusterStatusSchema,
  isOperatorOwnedEtcdEnv,
  SCOPE_ANNOTATION,
  SCOPE_CLUSTERWIDE,
  type SpecValidation,
  supportedMinors,
} from "../shared/api/etcd-cluster.ts";
import { EtcdRestoreSpecSchema, EtcdRestoreStatusSchema } from "../shared/api/etcd-restore.ts";
import { validateEtcdClusterSpec } from "../shared/api/validate-etcd-cluster.ts";
import { DEFAULT_ETCD_VERSION, ETCD_VERSIONS, minorOf } from "../shared/etcd-versions.ts";

function problemsOf(result: SpecValidation): string[] {
  return result.ok ? [] : result.problems;
}

/** The single problem a spec has; fails the test when it has none or several. */
function problem(t: Pick<typeof tap, "equal">, spec: unknown): string {
  const problems = problemsOf(validateEtcdClusterSpec(spec));
  t.equal(problems.length, 1, `one problem for ${JSON.stringify(spec)}: ${JSON.stringify(problems)}`);
  return problems[0] ?? "";
}

const TESTED_MINORS = ETCD_VERSIONS.map(minorOf);
const SUGGESTION = `use ${TESTED_MINORS.slice(0, -1).join(", ")} or ${TESTED_MINORS.at(-1)} (e.g. "${DEFAULT_ETCD_VERSION}")`;

tap.test("a minimal spec gets the coreos defaults and the newest etcd", async (t) => {
  t.same(validateEtcdClusterSpec({ size: 3 }), {
    ok: true,
    spec: {
      size: 3,
      repository: "quay.io/coreos/etcd",
      version: DEFAULT_ETCD_VERSION,
      paused: false,
      pod: {},
      maintenance: {
        defragmentation: { enabled: true, thresholdPercent: 50, minimumBytes: 64 * 1024 * 1024 },
      },
    },
    warnings: [],
  });
});

tap.test("a leading v is accepted and stripped from the version", async (t) => {
  const result = validateEtcdClusterSpec({ size: 3, version: "v3.5.35" });
  t.ok(result.ok);
  t.equal(result.ok && result.spec.version, "3.5.35");
  t.equal(validateEtcdClusterSpec({ size: 1, version: "3.6.16" }).ok, true);
});

tap.test("given values are kept: repository, paused, pod policy, TLS and maintenance", async (t) => {
  const spec = {
    size: 5,
    repository: "registry.example.com:5000/mirror/etcd",
    version: "3.6.16",
    paused: true,
    pod: {
      labels: { tier: "storage", "example.com/team": "db" },
      etcdEnv: [{ name: "ETCD_QUOTA_BACKEND_BYTES", value: "4294967296" }],
      resources: { limits: { cpu: "1" } },
      ClusterDomain: ".cluster.local",
    },
    TLS: { static: { member: { peerSecret: "peer", serverSecret: "server" }, operatorSecret: "client" } },
    maintenance: {
      quotaBackendBytes: 8 * 1024 * 1024 * 1024,
      defragmentation: { enabled: false, thresholdPercent: 30, minimumBytes: 0 },
    },
  };
  t.same(validateEtcdClusterSpec(spec), { ok: true, spec, warnings: [] });
});

tap.test(
  "maintenance: a quota out of range, a second quota in etcdArgs and bad defrag settings are refused",
  async (t) => {
    const problems = (spec: Record<string, unknown>) => {
      const result = validateEtcdClusterSpec({ size: 3, ...spec });
      return result.ok ? [] : result.problems;
    };
    t.match(problems({ maintenance: { quotaBackendBytes: 1024 } }), [
      /spec\.maintenance\.quotaBackendBytes must be a whole number of bytes from 16777216 \(16 MiB\) to 68719476736 \(64 GiB\) \(got 1024\)/,
    ]);
    t.match(problems({ maintenance: { quotaBackendBytes: "8Gi" } }), [
      /quotaBackendBytes must be a whole number of bytes/,
    ]);
    t.match(
      problems({
        maintenance: { quotaBackendBytes: 1 << 30 },
        pod: { etcdArgs: ["--max-txn-ops=512", "--quota-backend-bytes=4294967296"] },
      }),
      [
        /spec\.pod\.etcdArgs\[1\] sets --quota-backend-bytes and so does spec\.maintenance\.quotaBackendBytes; keep one/,
      ],
    );
    t.match(problems({ maintenance: { defragmentation: { thresholdPercent: 100 } } }), [
      /thresholdPercent must be a whole percentage from 1 to 99 \(got 100\)/,
    ]);
    t.match(problems({ maintenance: { defragmentation: { minimumBytes: -1 } } }), [
      /minimumBytes must be a whole number of bytes, 0 or more \(got -1\)/,
    ]);
    t.match(problems({ maintenance: { defragmentation: { enabled: "yes" } } }), [/defragmentation\.enabled/]);
    t.same(
      problems({ maintenance: { quotaBackendBytes: 16 * 1024 * 1024 } }),
      [],
      "16 MiB is the smallest quota",
    );
    t.match(problems({ maintenance: { defragmentation: { schedule: "0 3 * *" } } }), [
      /spec\.maintenance\.defragmentation\.schedule "0 3 \* \*" is not a cron schedule of five fields .*: it needs exactly five fields/,
    ]);
    t.match(problems({ maintenance: { defragmentation: { schedule: "61 3 * * *" } } }), [
      /is not a cron schedule.*61/,
    ]);
    t.same(
      problems({ maintenance: { defragmentation: { schedule: "0 3 * * 0" } } }),
      [],
      "a weekly schedule",
    );
  },
);

tap.test("even sizes are allowed with a warning that recommends an odd size", async (t) => {
  const result = validateEtcdClusterSpec({ size: 4 });
  t.ok(result.ok);
  t.same(result.ok && result.warnings, [
    "spec.size 4 is even: it tolerates no more failed members than 3 would; an odd size (3 or 5) is recommended",
  ]);
});

tap.test("etcd 3.4 is accepted with a warning; the oldest minor supported is 3.4", async (t) => {
  t.equal(supportedMinors()[0], "3.4");
  t.equal(supportedMinors().at(-1), minorOf(DEFAULT_ETCD_VERSION));
  const result = validateEtcdClusterSpec({ size: 3, version: "3.4.30" });
  t.ok(result.ok);
  t.match(result.ok && result.warnings, [/etcd 3\.4 runs but is not tested by this operator/]);
});

tap.test("bad sizes are refused with a sentence that names the field", async (t) => {
  t.equal(problem(t, { size: 0 }), "spec.size 0 is too small: an etcd cluster needs at least 1 member");
  t.equal(problem(t, { size: -1 }), "spec.size -1 is too small: an etcd cluster needs at least 1 member");
  t.equal(
    problem(t, { size: 100 }),
    "spec.size 100 is too large: this operator runs at most 9 members, because every write waits for a " +
      "majority of them; 3, 5 or 7 are the usual sizes",
  );
  t.equal(problem(t, { size: 3.5 }), "spec.size must be a whole number of members (got 3.5)");
  t.equal(problem(t, { size: "3" }), 'spec.size must be a whole number of members (got "3")');
  t.equal(problem(t, {}), "spec.size is required: the number of etcd members, e.g. 3");
});

tap.test("unsupported or malformed versions are refused, naming the minors to use", async (t) => {
  t.equal(
    problem(t, { size: 3, version: "3.2.13" }),
    `spec.version "3.2.13" is not supported: etcd older than 3.4 cannot be run by this operator; ${SUGGESTION}`,
  );
  t.equal(
    problem(t, { size: 3, version: "2.3.8" }),
    `spec.version "2.3.8" is not supported: etcd older than 3.4 cannot be run by this operator; ${SUGGESTION}`,
  );
  t.equal(
    problem(t, { size: 3, version: "3.9.0" }),
    `spec.version "3.9.0" is not supported: etcd 3.9 is newer than this operator knows (newest: ` +
      `${minorOf(DEFAULT_ETCD_VERSION)}); ${SUGGESTION}`,
  );
  t.match(
    problem(t, { size: 3, version: "4.0.0" }),
    /^spec\.version "4\.0\.0" is not supported: etcd 4\.0 is newer/,
  );
  for (const version of ["latest", "3.5", "3.5.35-rc.0", " 3.5.35", "v3.5.35;"]) {
    t.equal(
      problem(t, { size: 3, version }),
      `spec.version ${JSON.stringify(version)} is not an etcd release: give major.minor.patch like ` +
        `"${DEFAULT_ETCD_VERSION}" (a leading "v" is allowed)`,
    );
  }
  t.equal(
    problem(t, { size: 3, version: 3.5 }),
    `spec.version must be a string like "${DEFAULT_ETCD_VERSION}" (got 3.5)`,
  );
});

tap.test("a repository with a tag, a digest or shell characters is refused", async (t) => {
  t.equal(
    problem(t, { size: 3, repository: "quay.io/coreos/etcd:v3.5.0" }),
    'spec.repository "quay.io/coreos/etcd:v3.5.0" must not carry a tag or digest: the operator runs ' +
      '<repository>:v<spec.version>, so give "quay.io/coreos/etcd" and set spec.version',
  );
  t.match(
    problem(t, { size: 3, repository: "quay.io/coreos/etcd@sha256:abcd" }),
    /must not carry a tag or digest/,
  );
  t.equal(
    problem(t, { size: 3, repository: "quay.io/coreos/etcd;rm -rf /" }),
    'spec.repository "quay.io/coreos/etcd;rm -rf /" contains characters that cannot appear in an image ' +
      'repository (";", " "): give a repository like "quay.io/coreos/etcd"',
  );
  t.match(problem(t, { size: 3, repository: "$(reboot)" }), /contains characters that cannot appear/);
  t.match(problem(t, { size: 3, repository: "Quay.io/CoreOS/etcd" }), /is not a valid image repository/);
  t.match(problem(t, { size: 3, repository: "" }), /is not a valid image repository/);
  for (const repository of [
    "etcd",
    "localhost:5000/etcd",
    "gcr.io/etcd-development/etcd",
    "my-registry.local/a/b_c",
  ]) {
    t.ok(validateEtcdClusterSpec({ size: 3, repository }).ok, `${repository} is fine`);
  }
});

tap.test("bad and reserved pod labels are refused", async (t) => {
  t.equal(
    problem(t, { size: 3, pod: { labels: { "-bad": "x" } } }),
    'spec.pod.labels has an invalid label key "-bad": its name "-bad" must be 1 to 63 letters, digits, "-", ' +
      '"_" or "." and start and end with a letter or digit',
  );
  t.match(
    problem(t, { size: 3, pod: { labels: { "Bad.Prefix/x": "y" } } }),
    /its prefix "Bad\.Prefix" must be/,
  );
  t.match(
    problem(t, { size: 3, pod: { labels: { tier: "a b" } } }),
    /^spec\.pod\.labels\["tier"\] has an invalid value "a b": label values are at most 63/,
  );
  t.match(
    problem(t, { size: 3, pod: { labels: { tier: 5 } } }),
    /^spec\.pod\.labels\["tier"\] must be a string \(got 5\); quote numbers and booleans/,
  );
  for (const key of ["app", "etcd_cluster", "etcd_node"]) {
    t.equal(
      problem(t, { size: 3, pod: { labels: { [key]: "x" } } }),
      `spec.pod.labels must not set "${key}": the operator labels its pods with "app" and "etcd_*" and finds ` +
        "them by those labels",
    );
  }
  t.match(
    problem(t, { size: 3, pod: { nodeSelector: { "bad key": "x" } } }),
    /^spec\.pod\.nodeSelector has an invalid/,
  );
  t.match(
    problem(t, { size: 3, pod: { annotations: { "etcd.version": "3.5.0" } } }),
    /^spec\.pod\.annotations must not set "etcd\.version"/,
  );
});

tap.test("etcdEnv may not set the variables the operator owns, nor bad or duplicate names", async (t) => {
  for (const name of [
    "ETCD_NAME",
    "ETCD_DATA_DIR",
    "ETCD_INITIAL_CLUSTER",
    "ETCD_INITIAL_CLUSTER_STATE",
    "ETCD_INITIAL_CLUSTER_TOKEN",
    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
    "ETCD_LISTEN_CLIENT_URLS",
    "ETCD_LISTEN_PEER_URLS",
    "ETCD_ADVERTISE_CLIENT_URLS",
    "ETCD_PEER_CERT_FILE",
  ]) {
    t.ok(isOperatorOwnedEtcdEnv(name), `${name} is owned`);
    t.equal(
      problem(t, {
        size: 3,
        pod: {
          etcdEnv: [
            { name: "ETCD_SNAPSHOT_COUNT", value: "1" },
            { name, value: "x" },
          ],
        },
      }),
      `spec.pod.etcdEnv[1] sets ${name}, which the operator sets itself from the cluster spec (etcd would refuse ` +
        "to start with both); remove it. `kubectl explain etcdcluster.spec.pod.etcdEnv` lists the variables the " +
        "operator owns",
    );
  }
  for (const name of ["ETCD_QUOTA_BACKEND_BYTES", "ETCD_AUTO_COMPACTION_RETENTION", "GOMAXPROCS"]) {
    t.notOk(isOperatorOwnedEtcdEnv(name), `${name} is the user's`);
  }
  t.match(
    problem(t, { size: 3, pod: { etcdEnv: [{ name: "1X" }] } }),
    /^spec\.pod\.etcdEnv\[0\] has an invalid name "1X"/,
  );
  t.equal(
    problem(t, { size: 3, pod: { etcdEnv: [{ name: "A" }, { name: "A" }] } }),
    "spec.pod.etcdEnv[1] sets A a second time; keep one entry",
  );
  t.equal(
    problem(t, { size: 3, pod: { etcdEnv: [{ name: "A", value: "1", valueFrom: {} }] } }),
    "spec.pod.etcdEnv[0] (A) gives both value and valueFrom; keep one",
  );
  t.match(
    problem(t, { size: 3, pod: { etcdEnv: [{ value: "1" }] } }),
    /^spec\.pod\.etcdEnv\[0\] must be an entry with a name/,
  );
});

tap.test("TLS secret names must be DNS-1123 names and client TLS needs the operator's secret", async (t) => {
  t.equal(
    problem(t, { size: 3, TLS: { static: { member: { peerSecret: "Peer_Secret" } } } }),
    'spec.TLS.static.member.peerSecret "Peer_Secret" is not a valid Secret name: use lower-case letters, digits, "-" and "."',
  );
  t.match(
    problem(t, { size: 3, TLS: { static: { member: { serverSecret: "server" } } } }),
    /^spec\.TLS\.static\.member\.serverSecret is set but operatorSecret is not/,
  );
  t.match(
    problem(t, { size: 3, TLS: { static: { operatorSecret: "client" } } }),
    /^spec\.TLS\.static\.operatorSecret is set but member\.serverSecret is not/,
  );
  t.ok(
    validateEtcdClusterSpec({ size: 3, TLS: { static: { member: { peerSecret: "peer" } } } }).ok,
    "peer TLS alone",
  );
});

tap.test("other pod policy mistakes are reported with the field's path", async (t) => {
  t.same(problemsOf(validateEtcdClusterSpec({ size: 3, pod: { resources: 5, tolerations: [1] } })), [
    "spec.pod.resources: expected object (got 5)",
    "spec.pod.tolerations[0]: expected object (got 1)",
  ]);
  t.match(
    problem(t, { size: 3, pod: { DNSTimeoutInSecond: -1 } }),
    /^spec\.pod\.DNSTimeoutInSecond must be a whole/,
  );
  t.match(
    problem(t, { size: 3, pod: { ClusterDomain: "Cluster Local" } }),
    /^spec\.pod\.ClusterDomain "Cluster Local"/,
  );
  t.match(
    problem(t, { size: 3, pod: { busyboxImage: "busybox; rm -rf /" } }),
    /^spec\.pod\.busyboxImage .* not a valid image/,
  );
  t.match(problem(t, { size: 3, paused: "yes" }), /^spec\.paused must be true or false/);
  t.match(problem(t, { size: 3, pod: [] }), /^spec\.pod must be an object/);
  t.same(problemsOf(validateEtcdClusterSpec(null)), [
    "spec must be an object with at least spec.size (got null)",
  ]);
});

tap.test("all problems of a spec are reported at once", async (t) => {
  const problems = problemsOf(
    validateEtcdClusterSpec({ size: 0, version: "latest", repository: "a:b", pod: { labels: { app: "x" } } }),
  );
  t.equal(problems.length, 4);
  t.ok(
    problems.every((p) => p.startsWith("spec.")),
    "every problem names its field",
  );
});

/** Every node of a schema, with its path. */
function* nodes(schema: unknown, path: string): Generator<[string, Record<string, unknown>]> {
  if (typeof schema !== "object" || schema === null) return;
  const node = schema as Record<string, unknown>;
  yield [path, node];
  for (const [name, sub] of Object.entries((node.properties as Record<string, unknown> | undefined) ?? {})) {
    yield* nodes(sub, `${path}.${name}`);
  }
  if (node.items) yield* nodes(node.items, `${path}[]`);
}

tap.test("every field of every schema has a description", async (t) => {
  const schemas = {
    EtcdClusterSpec: EtcdClusterSpecSchema,
    EtcdClusterStatus: EtcdClusterStatusSchema,
    EtcdBackupSpec: EtcdBackupSpecSchema,
    EtcdBackupStatus: EtcdBackupStatusSchema,
    EtcdRestoreSpec: EtcdRestoreSpecSchema,
    EtcdRestoreStatus: EtcdRestoreStatusSchema,
  };
  for (const [name, schema] of Object.entries(schemas)) {
    const missing = [...nodes(schema, name)]
      .filter(([path, node]) => !path.endsWith("[]") || node.type === "object")
      .filter(([, node]) => typeof node.description !== "string" || node.description.length < 10)
      .map(([path]) => path);
    t.same(missing, [], `${name}: fields without a description`);
  }
});

tap.test("the scope annotation is coreos's", async (t) => {
  t.equal(SCOPE_ANNOTATION, "etcd.database.coreos.com/scope");
  t.equal(SCOPE_CLUSTERWIDE, "clusterwide");
});

tap.test("the example manifests satisfy the schemas", async (t) => {
  const read = (file: string) => parse(readFileSync(join("manifests/examples", file), "utf8"));
  t.ok(validateEtcdClusterSpec(read("example-etcd-cluster.yaml").spec).ok);
  for (const file of ["example-etcd-backup-s3.yaml", "example-etcd-backup-oss.yaml"]) {
    t.same([...Value.Errors(EtcdBackupSpecSchema, read(file).spec)], [], file);
  }
  t.same([...Value.Errors(EtcdRestoreSpecSchema, read("example-etcd-restore.yaml").spec)], []);
});

tap.test("TypeBox schemas become structural CRD schemas", async (t) => {
  t.same(
    toStructural(Type.Record(Type.String(), Type.Integer(), { description: "a map" })),
    { description: "a map", type: "object", additionalProperties: { type: "integer" } },
    "a Record is additionalProperties",
  );
  t.same(
    toStructural(Type.Union([Type.Literal("a"), Type.Literal("b")], { description: "one of" })),
    { description: "one of", type: "string", enum: ["a", "b"] },
    "a union of literals is an enum",
  );
  t.same(
    toStructural(Type.Integer({ exclusiveMinimum: 0 })),
    { type: "integer", minimum: 0, exclusiveMinimum: true },
    "JSON Schema's numeric exclusiveMinimum is OpenAPI 3.0's boolean",
  );
  t.same(
    toStructural(Type.Object({ a: Type.Optional(Type.String()) }, { $id: "X", additionalProperties: false })),
    { type: "object", properties: { a: { type: "string" } } },
    "$id, optional markers and additionalProperties: false are dropped",
  );
  t.throws(() => toStructural(Type.Union([Type.String(), Type.Integer()])), /only unions of literals/);
  t.throws(() => toStructural(Type.Tuple([Type.String()])), /a tuple has no structural CRD equivalent/);
  t.throws(
    () => toStructural(Type.Not(Type.String())),
    /the schema keyword "not" has no structural CRD equivalent/,
  );
  t.throws(() => toStructural(Type.Any()), /needs a type/);
});

tap.test("the generated CRDs carry names, subresources and printer columns", async (t) => {
  const [cluster, backup, restore] = crdManifests();
  t.equal(cluster?.metadata.name, "etcdclusters.etcd.database.coreos.com");
  t.same(cluster?.spec.names, {
    kind: "EtcdCluster",
    listKind: "EtcdClusterList",
    plural: "etcdclusters",
    singular: "etcdcluster",
    shortNames: ["etcd"],
  });
  const version = cluster?.spec.versions[0];
  t.same(version?.subresources, {
    status: {},
    scale: {
      specReplicasPath: ".spec.size",
      statusReplicasPath: ".status.size",
      labelSelectorPath: ".status.selector",
    },
  });
  t.same(
    version?.additionalPrinterColumns.map((c) => [c.name, c.jsonPath]),
    [
      ["Size", ".spec.size"],
      ["Ready", ".status.readyMembers"],
      ["Version", ".status.currentVersion"],
      ["Phase", ".status.phase"],
      ["Age", ".metadata.creationTimestamp"],
    ],
  );
  t.same(
    backup?.spec.versions[0]?.additionalPrinterColumns.map((c) => c.name),
    ["Storage", "Succeeded", "Last Success", "Revision", "Size", "Path", "Age"],
  );
  t.same(
    restore?.spec.versions[0]?.additionalPrinterColumns.map((c) => c.name),
    ["Cluster", "Phase", "Succeeded", "Backup", "Age"],
  );
  for (const crd of [backup, restore]) t.same(crd?.spec.versions[0]?.subresources, { status: {} });
  const text = JSON.stringify(crdManifests());
  for (const keyword of ['"$id"', '"const"', '"anyOf"', '"patternProperties"', '"properties":{}']) {
    t.notOk(text.includes(keyword), `no ${keyword} left in the CRDs`);
  }
});

tap.test("the committed CRD files are what the generator writes", async (t) => {
  t.same(staleCrdFiles(), [], "run `node infra/crds.ts` to regenerate");
  const check = spawnSync(process.execPath, ["infra/crds.ts", "--check"], { encoding: "utf8" });
  t.equal(check.status, 0, check.stderr);
});

tap.test("--check finds a CRD file that was edited or is missing", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "crds-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  cpSync(CRD_DIR, dir, { recursive: true });
  t.same(staleCrdFiles(dir), []);
  const [first, second] = crdFiles(dir);
  if (!first || !second) throw new Error("expected three CRD files");
  writeFileSync(first.path, first.content.replace("maximum: 9", "maximum: 7"));
  rmSync(second.path);
  t.same(staleCrdFiles(dir), [first.path, second.path]);
});

tap.test("etcdArgs: extra flags, but none the operator owns, and each once", async (t) => {
  const ok = validateEtcdClusterSpec({
    size: 3,
    pod: {
      etcdArgs: [
        "--quota-backend-bytes=8589934592",
        "--experimental-initial-corrupt-check",
        "--log-level=warn",
      ],
    },
  });
  t.ok(ok.ok, "ordinary flags, with or without a value, are accepted");
  for (const arg of [
    "--name=x",
    "--data-dir=/tmp",
    "--wal-dir=/tmp",
    "--listen-client-urls=http://0.0.0.0:1",
    "--listen-metrics-urls=http://0.0.0.0:2381",
    "--advertise-client-urls=http://x:2379",
    "--initial-cluster-state=new",
    "--initial-cluster-token=t",
    "--peer-auto-tls",
    "--client-cert-auth",
    "--trusted-ca-file=/ca",
  ]) {
    t.match(
      problem(t, { size: 3, pod: { etcdArgs: [arg] } }),
      new RegExp(`^spec\\.pod\\.etcdArgs\\[0\\] sets ${arg.split("=")[0]}, which the operator sets itself`),
      `${arg} is refused`,
    );
  }
  for (const arg of ["quota-backend-bytes=1", "-x", "--Upper=1", "--a=1\n--data-dir=/x", "", 7]) {
    t.match(
      problem(t, { size: 3, pod: { etcdArgs: [arg] } }),
      /^spec\.pod\.etcdArgs\[0\] .* is not an etcd flag: write "--flag=value" or "--flag", on one line$/,
      `${JSON.stringify(arg)} is no flag`,
    );
  }
  t.equal(
    problem(t, { size: 3, pod: { etcdArgs: ["--log-level=warn", "--log-level=debug"] } }),
    "spec.pod.etcdArgs[1] sets --log-level a second time; keep one entry",
  );
  t.match(problem(t, { size: 3, pod: { etcdArgs: "--log-level=warn" } }), /must be a list/);
});

tap.test("priorityClassName: the name of a PriorityClass", async (t) => {
  t.ok(validateEtcdClusterSpec({ size: 3, pod: { priorityClassName: "system-cluster-critical" } }).ok);
  t.match(
    problem(t, { size: 3, pod: { priorityClassName: "Not Valid;rm -rf /" } }),
    /^spec\.pod\.priorityClassName "Not Valid;rm -rf \/" must be the name of a PriorityClass/,
  );
});

// Unit tests of the pure parts of backups and restores: object names and pruning, the snapshot
// integrity check, credentials from Secrets, and the restore seed pod.
import { createHash, randomBytes } from "node:crypto";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { crc32 } from "node:zlib";
import t from "tap";
import {
  backupsToPrune,
  META_SUFFIX,
  parsePeriodicKey,
  periodicBackups,
  periodicKey,
  restoreCandidate,
} from "../functions/backup-objects.ts";
import type { Observation } from "../functions/plan.ts";
import {
  AUTO_RESTORE_ANNOTATION,
  backsUpCluster,
  latestBackup,
  restoreFor,
  restoreFromLatestBackup,
} from "../functions/restore-from-backup.ts";
import type { EtcdBackup } from "../shared/api/etcd-backup.ts";
import {
  type EtcdCluster,
  type NormalizedSpec,
  SCOPE_ANNOTATION,
  SCOPE_CLUSTERWIDE,
} from "../shared/api/etcd-cluster.ts";
import { CommitGate, CommitRefusedError } from "../shared/commit-gate.ts";
import type { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";
import { ossCredentialsFromSecret, s3CredentialsFromSecret } from "../shared/object-store/credentials.ts";
import { MIN_PART_SIZE, uploadStream } from "../shared/object-store/s3-multipart.ts";
import { ObjectStoreError, splitBucketPath } from "../shared/object-store/types.ts";
import { restoreSeedPod } from "../shared/restore-pods.ts";
import { type DigestChecks, SnapshotChecksums, SnapshotDigest } from "../shared/snapshot-digest.ts";

/** Bytes shaped like an etcd snapshot: a body followed by the SHA-256 of that body. */
function fakeSnapshot(size: number): Buffer {
  const body = randomBytes(size);
  return Buffer.concat([body, createHash("sha256").update(body).digest()]);
}

async function digestOf(data: Buffer, chunk = 4096, checks?: DigestChecks) {
  const digest = new SnapshotDigest(checks);
  const chunks: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunk) chunks.push(data.subarray(i, i + chunk));
  await pipeline(Readable.from(chunks), digest, new Writable({ write: (_c, _e, done) => done() }));
  return digest.result();
}

t.test("object names carry cluster, revision and time and sort by time", async (t) => {
  const at = new Date("2026-11-29T13:45:00.123Z");
  const key = periodicKey("dir/etcd.backup", "example", 4401, at);
  t.equal(key, "dir/etcd.backup_example_v4401_20261129-134500.123Z");
  t.same(parsePeriodicKey("dir/etcd.backup", key), {
    key,
    cluster: "example",
    revision: 4401,
    stamp: "20261129-134500.123Z",
  });
  t.equal(
    parsePeriodicKey("dir/etcd.backup", `${key}${META_SUFFIX}`),
    undefined,
    "metadata files are not backups",
  );
  t.equal(
    parsePeriodicKey("dir/etcd.backup", "dir/etcd.backup"),
    undefined,
    "the one-shot object is not periodic",
  );
  t.equal(parsePeriodicKey("dir/etcd", key), undefined, "another prefix's backups are not ours");
  const keys = [0, 3, 1, 2].map((m) => periodicKey("p", "c", 10 + m, new Date(at.getTime() + m * 60_000)));
  t.same(
    periodicBackups("p", keys).map((b) => b.revision),
    [13, 12, 11, 10],
    "newest first",
  );
});

t.test("pruning keeps the newest maxBackups and never the one just taken", async (t) => {
  const at = Date.parse("2026-11-29T00:00:00Z");
  const keys = Array.from({ length: 5 }, (_, i) => periodicKey("p", "c", i + 1, new Date(at + i * 1000)));
  const newest = keys[4] ?? "";
  t.same(backupsToPrune("p", keys, 3, newest), [keys[1], keys[0]]);
  t.same(backupsToPrune("p", keys, 0, newest), [], "0 keeps all");
  t.same(backupsToPrune("p", keys, 1, newest), [keys[3], keys[2], keys[1], keys[0]]);
  // A clock that went backwards: the just-taken backup sorts oldest, yet it is kept.
  const skewed = periodicKey("p", "c", 99, new Date(at - 3_600_000));
  const pruned = backupsToPrune("p", [...keys, skewed], 2, skewed);
  t.notOk(pruned.includes(skewed), "the new backup survives");
  t.equal(pruned.length, 4, "room for one more besides it");
  t.same(
    backupsToPrune("p", [...keys, "p.other", `${newest}${META_SUFFIX}`], 5, newest),
    [],
    "other objects untouched",
  );
});

t.test("a restore path names an object or the newest periodic backup under it", async (t) => {
  const a = periodicKey("p", "c", 1, new Date("2026-01-01T00:00:00Z"));
  const b = periodicKey("p", "c", 2, new Date("2026-01-02T00:00:00Z"));
  t.equal(restoreCandidate("p", ["p", a, b]), "p", "the exact object wins");
  t.equal(restoreCandidate("p", [a, b, `${b}${META_SUFFIX}`]), b);
  t.equal(restoreCandidate("p", ["q"]), undefined);
});

t.test("the snapshot digest checks etcd's trailer across any chunking", async (t) => {
  const snapshot = fakeSnapshot(100_000);
  for (const chunk of [1, 7, 32, 33, 4096, 1 << 20]) {
    const result = await digestOf(snapshot, chunk);
    t.ok(result.trailerValid, `valid with ${chunk}-byte chunks`);
    t.equal(result.size, snapshot.length);
    t.equal(result.sha256, createHash("sha256").update(snapshot).digest("hex"));
  }
  t.notOk((await digestOf(snapshot.subarray(0, snapshot.length - 1000))).trailerValid, "truncated");
  const corrupted = Buffer.from(snapshot);
  corrupted[5000] = (corrupted[5000] ?? 0) ^ 0xff;
  t.notOk((await digestOf(corrupted)).trailerValid, "one flipped byte");
  t.notOk((await digestOf(Buffer.alloc(0))).trailerValid, "empty");
  t.notOk((await digestOf(snapshot.subarray(0, 32))).trailerValid, "trailer only");
  // The whole-object hash continues the database's pass with the held-back tail: right for any
  // length, including those shorter than a trailer.
  for (const length of [0, 1, 31, 32, 33, 1000]) {
    const bytes = snapshot.subarray(0, length);
    t.equal(
      (await digestOf(bytes, 7)).sha256,
      createHash("sha256").update(bytes).digest("hex"),
      `whole-object hash of ${length} bytes`,
    );
  }
});

t.test("the snapshot digest's CRC-32 is zlib's over every byte, across any chunking", async (t) => {
  const snapshot = fakeSnapshot(100_000);
  const expected = crc32(snapshot).toString(16).padStart(8, "0");
  for (const chunk of [1, 7, 4096, 1 << 20]) {
    t.equal((await digestOf(snapshot, chunk)).crc32, expected, `${chunk}-byte chunks`);
  }
  t.equal((await digestOf(Buffer.alloc(0))).crc32, "00000000", "empty: 8 digits still");
  const corrupted = Buffer.from(snapshot);
  corrupted[5000] = (corrupted[5000] ?? 0) ^ 0x01;
  t.not((await digestOf(corrupted)).crc32, expected, "one flipped bit changes it");
  const only = await digestOf(snapshot, 4096, { wholeHash: false, trailer: false });
  t.same(
    { crc32: only.crc32, sha256: only.sha256, trailerValid: only.trailerValid },
    { crc32: expected, sha256: undefined, trailerValid: undefined },
    "asked for the CRC-32 alone, it hashes nothing else",
  );
  t.equal((await digestOf(snapshot, 4096, { crc32: false })).crc32, undefined, "and can be left out");
});

t.test("the checksums fed chunk by chunk (a restore's fetch) match the pipeline stage's", async (t) => {
  const snapshot = fakeSnapshot(100_000);
  for (const chunk of [1, 33, 4096]) {
    const checks = new SnapshotChecksums();
    for (let i = 0; i < snapshot.length; i += chunk) checks.update(snapshot.subarray(i, i + chunk));
    t.same(checks.result(), await digestOf(snapshot, chunk), `${chunk}-byte chunks`);
    t.ok(checks.result().trailerValid, "etcd's trailer checked");
  }
  const corrupted = Buffer.from(snapshot);
  corrupted[99] = (corrupted[99] ?? 0) ^ 0x01;
  const checks = new SnapshotChecksums({ wholeHash: false, trailer: false });
  checks.update(corrupted);
  t.not(checks.result().crc32, (await digestOf(snapshot)).crc32, "a flipped bit changes the CRC-32");
});

t.test("the commit gate holds the last chunk until its check passes, and refuses it otherwise", async (t) => {
  const data = randomBytes(10_000);
  const pieces = [data.subarray(0, 4000), data.subarray(4000, 8000), data.subarray(8000)];
  const received: Buffer[] = [];
  let receivedAtCheck = -1;
  const sink = () =>
    new Writable({
      write: (c: Buffer, _e, done) => {
        received.push(c);
        done();
      },
    });
  const passing = new CommitGate(async () => {
    receivedAtCheck = Buffer.concat(received).length;
  });
  await pipeline(Readable.from(pieces), passing, sink());
  t.equal(receivedAtCheck, 8000, "everything but the last chunk had passed when the check ran");
  t.same(Buffer.concat(received), data, "then the last chunk passed: the bytes are exact");
  t.equal(passing.refused, undefined, "nothing refused");

  received.length = 0;
  const lost = new Error("lease lost");
  const refusing = new CommitGate(async () => {
    throw lost;
  });
  await t.rejects(pipeline(Readable.from(pieces), refusing, sink()), CommitRefusedError, "the stream fails");
  t.equal(Buffer.concat(received).length, 8000, "the last chunk never passed");
  t.equal(refusing.refused, lost, "the check's own error is kept");
});

t.test("a digest asked for one check makes only that one", async (t) => {
  const snapshot = fakeSnapshot(50_000);
  const whole = await digestOf(snapshot, 4096, { trailer: false });
  t.equal(whole.sha256, createHash("sha256").update(snapshot).digest("hex"), "the whole-object hash");
  t.equal(whole.trailerValid, undefined, "no trailer check");
  t.equal(whole.size, snapshot.length);
  const trailer = await digestOf(snapshot, 4096, { wholeHash: false });
  t.equal(trailer.sha256, undefined, "no whole-object hash");
  t.equal(trailer.trailerValid, true, "the trailer check");
  const corrupted = Buffer.from(snapshot);
  corrupted[100] = (corrupted[100] ?? 0) ^ 0xff;
  t.equal(
    (await digestOf(corrupted, 4096, { wholeHash: false })).trailerValid,
    false,
    "still catches a flipped byte",
  );
});

/**
 * The S3 client seam of uploadStream: records each command and answers parts after a delay, so
 * several can be in flight; `failPart` makes that part's upload fail.
 */
function recordingS3(options: { failPart?: number } = {}) {
  const parts = new Map<number, Buffer>();
  const calls: string[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let completedOrder: number[] = [];
  const client = {
    async send(command: { constructor: { name: string }; input: Record<string, unknown> }) {
      const name = command.constructor.name;
      calls.push(name);
      if (name === "CreateMultipartUploadCommand") return { UploadId: "u1" };
      if (name === "UploadPartCommand") {
        const number = Number(command.input.PartNumber);
        // The caller reuses its buffer once this resolves: copy, as a real request body is sent.
        parts.set(number, Buffer.from(command.input.Body as Buffer));
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await new Promise((r) => setTimeout(r, 5 + (number % 3) * 5));
        inFlight--;
        if (number === options.failPart) throw new Error(`part ${number} refused`);
        return { ETag: `"etag-${number}"` };
      }
      if (name === "CompleteMultipartUploadCommand") {
        const upload = command.input.MultipartUpload as { Parts: { PartNumber: number }[] };
        completedOrder = upload.Parts.map((p) => p.PartNumber);
        return {};
      }
      return {};
    },
  };
  return {
    client: client as unknown as Parameters<typeof uploadStream>[0],
    calls,
    assembled: () => Buffer.concat([...parts.entries()].sort(([a], [b]) => a - b).map(([, data]) => data)),
    maxInFlight: () => maxInFlight,
    completedOrder: () => completedOrder,
  };
}

t.test("a multipart upload keeps its ring of part buffers busy and the bytes in order", async (t) => {
  const data = randomBytes(MIN_PART_SIZE * 5 + 12_345);
  const chunks: Buffer[] = [];
  for (let i = 0; i < data.length; i += 65_536) chunks.push(data.subarray(i, i + 65_536));
  const s3 = recordingS3();
  const result = await uploadStream(s3.client, { bucket: "b", key: "k" }, Readable.from(chunks), {
    partSize: MIN_PART_SIZE,
    buffers: 4,
  });
  t.same(result, { parts: 6, bytes: data.length });
  t.ok(s3.assembled().equals(data), "the parts put together are the stream, byte for byte");
  t.same(s3.completedOrder(), [1, 2, 3, 4, 5, 6], "Complete lists every part in order");
  t.equal(s3.maxInFlight(), 4, "with a store slower than the stream, every buffer of the ring is in flight");
  t.notOk(s3.calls.includes("AbortMultipartUploadCommand"));
});

t.test("a failed part aborts the upload and the error reaches the caller", async (t) => {
  const data = randomBytes(MIN_PART_SIZE * 4);
  const s3 = recordingS3({ failPart: 2 });
  await t.rejects(
    uploadStream(s3.client, { bucket: "b", key: "k" }, Readable.from([data]), {
      partSize: MIN_PART_SIZE,
      buffers: 3,
    }),
    /part 2 refused/,
  );
  t.ok(s3.calls.includes("AbortMultipartUploadCommand"), "the upload is aborted");
  t.notOk(s3.calls.includes("CompleteMultipartUploadCommand"), "and never completed");
});

t.test("bucket paths", async (t) => {
  t.same(splitBucketPath("bucket/dir/etcd.backup"), { bucket: "bucket", key: "dir/etcd.backup" });
  for (const bad of ["bucket", "bucket/", "/key", "", "bucket/dir/"]) {
    t.throws(() => splitBucketPath(bad), ObjectStoreError, `"${bad}" refused`);
  }
});

t.test("credentials come from coreos-style Secrets and are never echoed", async (t) => {
  const credentials = "[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = s3cr3t\n";
  const config = "[default]\nregion = eu-west-1\n";
  t.same(s3CredentialsFromSecret("aws", { credentials, config }), {
    accessKeyId: "AKIDEXAMPLE",
    secretAccessKey: "s3cr3t",
    sessionToken: undefined,
    region: "eu-west-1",
  });
  t.equal(
    s3CredentialsFromSecret("aws", { credentials, config: "[profile default]\nregion = us-west-2\n" }).region,
    "us-west-2",
  );
  const missing = t.throws(() => s3CredentialsFromSecret("aws", { config }));
  t.match(String(missing), /no key "credentials"/);
  const partial = t.throws(() =>
    s3CredentialsFromSecret("aws", { credentials: "[default]\naws_access_key_id = X\n" }),
  );
  t.match(String(partial), /aws_secret_access_key/);
  t.same(ossCredentialsFromSecret("oss", { accessKeyID: "id", accessKeySecret: "secret" }), {
    accessKeyId: "id",
    accessKeySecret: "secret",
  });
  const wrongKeys = t.throws(() =>
    ossCredentialsFromSecret("oss", { accessKeyId: "id", secret: "very-secret" }),
  );
  t.match(String(wrongKeys), /accessKeyID and accessKeySecret/);
  t.notMatch(String(wrongKeys), /very-secret/, "values are not in the message");
});

t.test("the restore seed pod restores before etcd starts, with credentials as a volume", async (t) => {
  const pod = restoreSeedPod({
    pod: {
      metadata: { name: "c-abc" },
      spec: { containers: [{ name: "etcd", image: "etcd:v3.6.16" }], volumes: [] },
    },
    source: {
      storageType: "S3",
      section: { path: "bucket/key", awsSecret: "aws", endpoint: "http://10.0.0.1:9000" },
      sha256: "ab",
      crc32: "0badf00d",
      size: 1234,
    },
    operatorImage: "example/etcd-operator:v1",
    etcdImage: "quay.io/coreos/etcd:v3.6.16",
    memberName: "c-abc",
    peerURL: "http://c-abc.c.default.svc:2380",
    clusterToken: "c-restore-uid",
  });
  t.same(
    pod.spec?.initContainers?.map((c) => c.name),
    ["fetch-backup", "restore-snapshot", "install-data-dir"],
  );
  const fetch = pod.spec?.initContainers?.[0];
  t.notOk(
    fetch?.env?.some((e) => /secret|key/i.test(e.name) && e.name !== "SECRET_DIR"),
    "no credential in env",
  );
  t.same(
    JSON.parse(fetch?.env?.find((e) => e.name === "STORAGE_SECTION")?.value ?? "{}"),
    { path: "bucket/key", awsSecret: "aws", endpoint: "http://10.0.0.1:9000" },
    "the fetch opens the store from the restore's section, naming the very object",
  );
  t.ok(pod.spec?.volumes?.some((v) => v.secret?.secretName === "aws"));
  const restore = pod.spec?.initContainers?.[1]?.command ?? [];
  t.ok(restore.includes("--initial-cluster=c-abc=http://c-abc.c.default.svc:2380"));
  t.ok(restore.includes("--initial-cluster-token=c-restore-uid"));
  t.ok(restore.includes("--skip-hash-check"), "the fetch compares the recorded checksum: one pass");
  t.same(
    fetch?.command,
    [
      "/nodejs/bin/node",
      "--external-memory-accounted-in-global-limit",
      "/app/infra/restore-init.ts",
      "fetch",
    ],
    "the fetch runs with V8's external memory counted in its heap limit",
  );
  const expected = Object.fromEntries(
    (fetch?.env ?? []).filter((e) => e.name.startsWith("EXPECT_")).map((e) => [e.name, e.value]),
  );
  t.same(
    expected,
    { EXPECT_SHA256: "ab", EXPECT_CRC32: "0badf00d", EXPECT_SIZE: "1234" },
    "the fetch is told the backup's recorded checksums and size",
  );
  t.equal(pod.spec?.containers[0]?.name, "etcd", "the member container is unchanged");
});

t.test(
  "a seed prepared beside the old members waits at a start gate that wants the restore's token",
  async (t) => {
    const input = {
      pod: { metadata: { name: "c-abc" }, spec: { containers: [{ name: "etcd", image: "etcd:v3.6.16" }] } },
      source: {
        storageType: "S3" as const,
        section: { path: "bucket/key", awsSecret: "aws" },
        sha256: "ab",
        size: 4096,
      },
      operatorImage: "example/etcd-operator:v1",
      etcdImage: "quay.io/coreos/etcd:v3.6.16",
      memberName: "c-abc",
      peerURL: "http://c-abc.c.default.svc:2380",
      clusterToken: "c-restore-uid",
    };
    const gated = restoreSeedPod({ ...input, startToken: "restore-uid" });
    t.same(
      gated.spec?.initContainers?.map((c) => c.name),
      ["fetch-backup", "restore-snapshot", "install-data-dir", "await-start"],
      "the gate comes last: etcd is held back only once its data dir is in place",
    );
    const gate = gated.spec?.initContainers?.[3];
    t.same(gate?.command?.slice(-1), ["await-start"]);
    t.same(gate?.env, [{ name: "START_TOKEN", value: "restore-uid" }]);
    t.ok(
      gate?.volumeMounts?.some((m) => m.mountPath === "/var/etcd"),
      "its marker lives on the data volume",
    );
    const fetchEnv = gated.spec?.initContainers?.[0]?.env ?? [];
    t.ok(
      fetchEnv.some((e) => e.name === "EXPECT_SIZE" && e.value === "4096"),
      "the fetch checks the size too",
    );
    t.same(
      restoreSeedPod(input).spec?.initContainers?.map((c) => c.name),
      ["fetch-backup", "restore-snapshot", "install-data-dir"],
      "without a token etcd starts once its data dir is in place",
    );
  },
);

t.test("every step of a restored seed runs as the user etcd runs as", async (t) => {
  const seed = (securityContext?: { runAsUser?: number; runAsNonRoot?: boolean }) =>
    restoreSeedPod({
      pod: {
        metadata: { name: "c-abc" },
        spec: { containers: [{ name: "etcd", image: "etcd:v3.6.16" }], securityContext },
      },
      source: { storageType: "S3", section: { path: "bucket/key", awsSecret: "aws" } },
      operatorImage: "example/etcd-operator:v1",
      etcdImage: "quay.io/coreos/etcd:v3.6.16",
      memberName: "c-abc",
      peerURL: "http://c-abc.c.default.svc:2380",
      clusterToken: "c-restore-uid",
      startToken: "restore-uid",
    });
  const users = (securityContext?: { runAsUser?: number; runAsNonRoot?: boolean }) =>
    Object.fromEntries(
      (seed(securityContext).spec?.initContainers ?? []).map((c) => [c.name, c.securityContext?.runAsUser]),
    );
  t.same(
    users(),
    { "fetch-backup": 0, "restore-snapshot": undefined, "install-data-dir": 0, "await-start": 0 },
    "no user asked for: the operator's steps run as root like the etcd image, which reads the data dir etcdutl made 0700",
  );
  t.same(
    users({ runAsUser: 1000 }),
    {
      "fetch-backup": undefined,
      "restore-snapshot": undefined,
      "install-data-dir": undefined,
      "await-start": undefined,
    },
    "the pod's user applies to every container as it is",
  );
  t.same(
    users({ runAsNonRoot: true }),
    {
      "fetch-backup": undefined,
      "restore-snapshot": 65532,
      "install-data-dir": undefined,
      "await-start": undefined,
    },
    "non-root asked for: etcdutl runs as the operator image's non-root user, which moves its output",
  );
});

t.test("seed members restored at once share the new cluster's whole membership", async (t) => {
  const initialCluster = ["c-a", "c-b", "c-c"].map((name) => ({
    name,
    peerURL: `http://${name}.c.default.svc:2380`,
  }));
  const pod = restoreSeedPod({
    pod: { metadata: { name: "c-b" }, spec: { containers: [{ name: "etcd", image: "etcd:v3.6.16" }] } },
    source: { storageType: "S3", section: { path: "bucket/key", awsSecret: "aws" } },
    operatorImage: "example/etcd-operator:v1",
    etcdImage: "quay.io/coreos/etcd:v3.6.16",
    memberName: "c-b",
    peerURL: "http://c-b.c.default.svc:2380",
    initialCluster,
    clusterToken: "c-restore-uid",
  });
  const restore = pod.spec?.initContainers?.[1]?.command ?? [];
  t.ok(
    restore.includes(
      "--initial-cluster=c-a=http://c-a.c.default.svc:2380,c-b=http://c-b.c.default.svc:2380,c-c=http://c-c.c.default.svc:2380",
    ),
  );
  t.ok(restore.includes("--name=c-b"));
  t.ok(
    restore.includes("--skip-hash-check"),
    "no SHA-256 to compare: the fetch checks etcd's trailer itself",
  );
  t.notOk(
    pod.spec?.initContainers?.[0]?.env?.some((e) => e.name === "EXPECT_SHA256"),
    "nor does the fetch compare one",
  );
  t.ok(restore.includes("--initial-advertise-peer-urls=http://c-b.c.default.svc:2380"));
});

t.test("all members lost: the newest successful backup of this cluster is found and restored", async (t) => {
  const backup = (
    name: string,
    endpoints: string[],
    lastSuccessDate?: string,
    storageType = "S3",
  ): EtcdBackup =>
    ({
      metadata: { name, namespace: "ns" },
      spec: {
        etcdEndpoints: endpoints,
        storageType,
        ...(storageType === "ABS"
          ? { abs: { path: "container/base", absSecret: "azure" } }
          : {
              s3: { path: "bucket/base", awsSecret: "aws", endpoint: "http://s3:9000", forcePathStyle: true },
            }),
      },
      status: lastSuccessDate
        ? {
            succeeded: true,
            lastSuccessDate,
            backupPath: `${storageType.toLowerCase()}://${storageType === "ABS" ? "container" : "bucket"}/${name}.db`,
            etcdRevision: 7,
          }
        : undefined,
    }) as EtcdBackup;
  const ours = ["http://c-client:2379"];
  t.ok(backsUpCluster(backup("a", ["http://c-client:2379"]), "c", "ns"));
  t.ok(backsUpCluster(backup("a", ["http://c-client.ns.svc:2379"]), "c", "ns"));
  t.notOk(backsUpCluster(backup("a", ["http://c-client.other.svc:2379"]), "c", "ns"), "another namespace's");
  t.notOk(backsUpCluster(backup("a", ["http://cc-client:2379"]), "c", "ns"), "another cluster's");
  const found = latestBackup(
    [
      backup("old", ours, "2026-11-29T10:00:00Z"),
      backup("new", ours, "2026-11-29T12:00:00Z"),
      backup("never", ours),
      backup("other", ["http://d-client:2379"], "2026-11-29T13:00:00Z"),
    ],
    "c",
    "ns",
  );
  t.equal(found?.metadata?.name, "new");
  const azure = latestBackup(
    [backup("new", ours, "2026-11-29T12:00:00Z"), backup("abs", ours, "2026-11-29T14:00:00Z", "ABS")],
    "c",
    "ns",
  );
  t.equal(azure?.metadata?.name, "abs", "whatever the storage");
  const cluster = { metadata: { name: "c", namespace: "ns", uid: "u1" } } as EtcdCluster;
  const restore = restoreFor(
    { cluster, spec: {} as NormalizedSpec, observation: {} as Observation },
    found ?? backup("x", []),
  );
  t.equal(restore.metadata.name, "c", "named like the cluster");
  t.same(restore.spec.etcdCluster, { name: "c" });
  t.equal(restore.spec.s3?.path, "bucket/new.db", "the very object the backup took");
  t.equal(restore.spec.s3?.endpoint, "http://s3:9000", "through the backup's store and credentials");
  t.equal(restore.metadata.ownerReferences?.[0]?.uid, "u1", "owned by the cluster");
  const fromAzure = restoreFor(
    { cluster, spec: {} as NormalizedSpec, observation: {} as Observation },
    azure ?? backup("x", []),
  );
  t.same(
    { type: fromAzure.spec.backupStorageType, abs: fromAzure.spec.abs, s3: fromAzure.spec.s3 },
    { type: "ABS", abs: { path: "container/abs.db", absSecret: "azure" }, s3: undefined },
    "an Azure backup restores from its blob, with its Secret",
  );
  t.equal(restore.metadata.annotations?.[AUTO_RESTORE_ANNOTATION], "all-members-lost");
  t.equal(restore.metadata.annotations?.[SCOPE_ANNOTATION], undefined, "no scope for a namespaced cluster");
  const clusterwide: EtcdCluster = {
    ...cluster,
    metadata: { ...cluster.metadata, annotations: { [SCOPE_ANNOTATION]: SCOPE_CLUSTERWIDE } },
  };
  const scoped = restoreFor(
    { cluster: clusterwide, spec: {} as NormalizedSpec, observation: {} as Observation },
    found ?? backup("x", []),
  );
  t.equal(
    scoped.metadata.annotations?.[SCOPE_ANNOTATION],
    SCOPE_CLUSTERWIDE,
    "a cluster-wide cluster's restore is annotated for the cluster-wide operator, which takes no other",
  );
});

t.test("all members lost: the loss is reported before the EtcdRestore is created", async (t) => {
  // A worker SIGKILLed right after creating the restore would otherwise leave the report unsent:
  // the next look finds the restore under way and says nothing (found by the chaos-steps suite).
  const calls: string[] = [];
  const kube = {
    async getRestore() {
      return undefined;
    },
    async listBackups() {
      return [
        {
          metadata: { name: "b", namespace: "ns" },
          spec: {
            etcdEndpoints: ["http://c-client:2379"],
            storageType: "S3",
            s3: { path: "bucket/b", awsSecret: "a" },
          },
          status: {
            succeeded: true,
            lastSuccessDate: "2026-11-29T12:00:00Z",
            backupPath: "s3://bucket/b",
            etcdRevision: 7,
          },
        },
      ];
    },
    async event(_o: unknown, _type: string, reason: string, _message: string, options?: { key?: string }) {
      calls.push(`event ${reason}${options?.key ? " (keyed)" : ""}`);
    },
    async createRestore(restore: { metadata: { name: string } }) {
      calls.push(`create restore ${restore.metadata.name}`);
    },
  } as unknown as Kube;
  const cluster = { metadata: { name: "c", namespace: "ns", uid: "u1" } } as EtcdCluster;
  const outcome = await restoreFromLatestBackup(
    { cluster, spec: {} as NormalizedSpec, observation: {} as Observation },
    { kube, log: silentLogger(), etcd: {}, guard: async () => {}, operatorImage: "x" },
  );
  t.same(calls, ["event RestoringFromBackup (keyed)", "create restore c"]);
  t.equal(outcome.announced, true, "reconcile does not send it again");
  t.match(outcome.event?.message, /revision 7\): writes after it are lost/);
});

t.test(
  "a Secret name no Secret can have is refused before any request (spec-fuzz seed 667166855)",
  async (t) => {
    const { openStore } = await import("../shared/object-store/index.ts");
    const { ObjectStoreError } = await import("../shared/object-store/types.ts");
    let reads = 0;
    const readSecret = async () => {
      reads++;
      return undefined;
    };
    for (const awsSecret of ["x".repeat(70_000), "Not_A_Name", "a".repeat(254)]) {
      const error = await openStore("S3", { s3: { path: "bucket/key", awsSecret } }, readSecret).catch(
        (e: unknown) => e,
      );
      t.ok(
        error instanceof ObjectStoreError && error.code === "InvalidCredentials",
        `${awsSecret.slice(0, 12)}… refused`,
      );
      t.ok(error instanceof Error && error.message.length < 300, "the message stays short");
    }
    t.equal(reads, 0, "no Secret was read");
    const valid = await openStore(
      "S3",
      { s3: { path: "bucket/key", awsSecret: "aws-creds" } },
      readSecret,
    ).catch((e: unknown) => e);
    t.match(String(valid), /not found/, "a valid name is looked up");
    t.equal(reads, 1);
  },
);

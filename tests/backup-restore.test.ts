// End-to-end: backups and restores against the local control plane, a real S3-compatible store
// (versitygw, built from its Go module) and the local OSS-protocol server (real OSS cannot run
// here; see docs/local-control-plane.md). 10,000 keys go through S3 and through OSS and come back equal after the
// cluster was deleted; a periodic policy keeps exactly the newest maxBackups; bad input (wrong or
// missing credentials, an unreachable store, a missing bucket, a corrupt or truncated backup) gives
// a clear status and Event and never touches the cluster.
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import {
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { Redis } from "ioredis";
import t from "tap";
import { type BackupJobResult, backupJob } from "../functions/backup.ts";
import { VERIFY_LABEL } from "../functions/verify-backup.ts";
import { waitFor } from "../infra/local/kube-wait.ts";
import { startOssServer } from "../infra/local/oss-server.ts";
import { BACKUP_PLURAL } from "../shared/api/etcd-backup.ts";
import { GROUP, SCOPE_ANNOTATION, SCOPE_CLUSTERWIDE, VERSION } from "../shared/api/etcd-cluster.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { acquireLease, LeaseLostError, leaseKey } from "../shared/lease.ts";
import { silentLogger } from "../shared/log.ts";
import {
  type BackupTestContext,
  type BadBackup,
  badBackupsFail,
  everyMemberLostRestored,
  periodicKeepsNewest,
  refusedRestoresTouchNothing,
  roundTrip,
  s3SuiteStore,
  writeKeys,
} from "./helpers/backup-suite.ts";
import {
  awsSecretData,
  createBackup,
  createSecret,
  eventSeen,
  getBackup,
  startClusterWithStore,
  waitBackupOutcome,
} from "./helpers/backups.ts";
import { createCluster, etcdClient, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const V36 = newestPatchOf("3.6") ?? "";
const KEYS = 10_000;

const S3_BUCKET = "backups";
const {
  local: cluster,
  store: s3Store,
  clients: c,
} = await startClusterWithStore({ name: "e2e-backup", bucket: S3_BUCKET }, (stop) => t.teardown(stop));
const s3: S3Client = s3Store.client();
t.teardown(() => s3.destroy());

const OSS_BUCKET = "oss-backups";
const ossKey = { accessKeyId: "LTAI5tLocalTestKey", accessKeySecret: randomBytes(18).toString("base64url") };
const oss = await startOssServer({
  dir: join(cluster.dir, "oss"),
  host: cluster.network.gateway,
  credentials: [ossKey],
  buckets: [OSS_BUCKET],
});
t.teardown(() => oss.stop());

await createSecret(c, NS, "aws", awsSecretData(s3Store));
await createSecret(c, NS, "aws-wrong", awsSecretData(s3Store, "not-the-secret"));
await createSecret(c, NS, "oss", {
  accessKeyID: ossKey.accessKeyId,
  accessKeySecret: ossKey.accessKeySecret,
});

// The operator image name maps to this checkout in the process kubelet (restore init containers).
const processes: OperatorProcess[] = [
  startOperatorProcess(cluster, "all", { OPERATOR_IMAGE: "localhost/etcd-operator:dev" }),
];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

const ctx: BackupTestContext = { c, ns: NS, keys: KEYS, version: V36 };

const s3Suite = s3SuiteStore(s3Store, S3_BUCKET);
t.teardown(() => s3Suite.store.close());

const s3Section = (path: string, extra: object = {}) => ({ ...s3Suite.section(path), ...extra });
const ossSection = (path: string) => ({
  path: `${OSS_BUCKET}/${path}`,
  ossSecret: "oss",
  endpoint: oss.endpoint,
});

async function objectBytes(key: string): Promise<Buffer> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: S3_BUCKET, Key: key }));
  return Buffer.from((await answer.Body?.transformToByteArray()) ?? []);
}

async function listKeys(prefix: string): Promise<string[]> {
  const answer = await s3.send(new ListObjectsV2Command({ Bucket: S3_BUCKET, Prefix: prefix }));
  return (answer.Contents ?? []).map((o) => o.Key ?? "").sort();
}

t.test(
  "10,000 keys through S3: backup, cluster deleted, restore staged beside the serving members",
  async (t) => {
    await roundTrip(ctx, t, "alpha", 3, {
      storageType: "S3",
      sectionName: "s3",
      section: s3Section("alpha/etcd.backup"),
    });
    const stored = await listKeys("alpha/");
    t.same(stored, ["alpha/etcd.backup", "alpha/etcd.backup.meta.json"], "the backup and its metadata file");
    const meta = JSON.parse((await objectBytes("alpha/etcd.backup.meta.json")).toString()) as {
      sha256: string;
      crc32: string;
    };
    const object = await objectBytes("alpha/etcd.backup");
    t.equal(
      meta.sha256,
      createHash("sha256").update(object).digest("hex"),
      "the stored SHA-256 matches the object",
    );
    t.equal(meta.crc32, crc32(object).toString(16).padStart(8, "0"), "and so does its CRC-32");
  },
);

t.test(
  "10,000 keys through OSS: backup, cluster deleted, restore in place (members kept apart)",
  async (t) => {
    await roundTrip(
      ctx,
      t,
      "beta",
      1,
      { storageType: "OSS", sectionName: "oss", section: ossSection("beta/etcd.backup") },
      { antiAffinity: true },
    );
  },
);

t.test("a periodic backup with maxBackups 3 keeps exactly the 3 newest", (t) =>
  periodicKeepsNewest(ctx, t, s3Suite, "gamma"),
);

t.test("bad input fails a backup clearly and writes nothing", async (t) => {
  const cases: BadBackup[] = [
    {
      name: "wrong-credentials",
      spec: { storageType: "S3", s3: s3Section("bad/x", { awsSecret: "aws-wrong" }) },
      reason: "InvalidCredentials",
      message: /refused the credentials/,
    },
    {
      name: "missing-secret",
      spec: { storageType: "S3", s3: s3Section("bad/x", { awsSecret: "no-such-secret" }) },
      reason: "InvalidCredentials",
      message: /secret "no-such-secret" not found/,
    },
    {
      name: "unreachable",
      spec: {
        storageType: "S3",
        s3: s3Section("bad/x", { endpoint: `http://${cluster.network.gateway}:1` }),
      },
      reason: "Unreachable",
      message: /unreachable/,
    },
    {
      name: "missing-bucket",
      spec: { storageType: "S3", s3: { ...s3Section("x"), path: "no-such-bucket/x" } },
      reason: "NoSuchBucket",
      message: /bucket does not exist/,
    },
    {
      name: "oss-wrong-secret",
      spec: { storageType: "OSS", oss: { ...ossSection("bad/x"), ossSecret: "oss-wrong" } },
      reason: "InvalidCredentials",
      message: /refused the credentials/,
    },
  ];
  await createSecret(c, NS, "oss-wrong", { accessKeyID: ossKey.accessKeyId, accessKeySecret: "wrong" });
  await badBackupsFail(ctx, t, cases, "http://alpha-client:2379", s3Suite.store);
});

t.test("a corrupt, truncated or foreign backup is refused and the cluster untouched", (t) =>
  // A backup recorded before CRC-32s were: its seeds compare the SHA-256.
  refusedRestoresTouchNothing(ctx, t, s3Suite, "alpha", false, (corrupt, metadata) => {
    const { crc32: _recorded, ...older } = JSON.parse(metadata.toString()) as Record<string, unknown>;
    const meta = Buffer.from(JSON.stringify(older));
    return [{ key: "refused/corrupt-older.db", body: corrupt, meta, message: /corrupt: its SHA-256 is/ }];
  }),
);

t.test("every member lost: the cluster comes back from its newest backup by itself", (t) =>
  everyMemberLostRestored(ctx, t, "alpha", 3),
);

t.test(
  "verification: a backup restored in a throwaway pod matches its record; a corrupted one fails",
  async (t) => {
    await createCluster(c, NS, "delta", { size: 1, version: V36 });
    await waitReady(c, NS, "delta", 1, 120_000);
    const written = await writeKeys(ctx, "delta");
    const spec = (path: string) => ({
      etcdEndpoints: ["http://delta-client:2379"],
      storageType: "S3",
      s3: s3Section(path),
      verification: { enabled: true },
    });
    await createBackup(c, NS, "delta-verified", spec("delta/good.backup"));
    const status = await waitBackupOutcome(c, NS, "delta-verified");
    t.equal(status.succeeded, true, "the backup succeeded");
    t.ok(
      (status.keyCount ?? 0) >= written.size,
      `the backup recorded ${status.keyCount} keys at revision ${status.etcdRevision}`,
    );
    const verified = await waitFor(
      "the verification",
      async () => (await getBackup(c, NS, "delta-verified")).status?.verification,
      { timeoutMs: 180_000, intervalMs: 500 },
    );
    t.equal(verified.succeeded, true, `verified: ${verified.message}`);
    t.equal(verified.keyCount, status.keyCount, "the restored store holds the recorded key count");
    t.ok((verified.revision ?? 0) >= (status.etcdRevision ?? Infinity), "at the backup's revision or later");
    t.equal(verified.backupPath, status.backupPath);
    t.equal(
      (await getBackup(c, NS, "delta-verified")).status?.lastVerified,
      verified.time,
      "lastVerified set",
    );
    t.ok(
      await eventSeen(c, NS, "EtcdBackup", "delta-verified", (e) => e.reason === "BackupVerified"),
      "BackupVerified Event",
    );
    const leftover = await waitFor(
      "the verification pod to go",
      async () => {
        const pods = await c.core.listNamespacedPod({ namespace: NS, labelSelector: VERIFY_LABEL });
        return pods.items.length === 0 ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    t.ok(leftover, "no verification pod is left");

    // Corrupt the object as soon as it is in the store (same size, one byte flipped): the backup
    // itself succeeded, its verification must not.
    const key = "delta/corrupted.backup";
    await createBackup(c, NS, "delta-corrupted", spec(key));
    await waitFor(
      "the backup object",
      async () =>
        s3.send(new HeadObjectCommand({ Bucket: S3_BUCKET, Key: key })).then(
          () => true,
          () => undefined,
        ),
      { timeoutMs: 60_000, intervalMs: 20 },
    );
    const bytes = await objectBytes(key);
    const middle = Math.floor(bytes.length / 2);
    bytes.writeUInt8(bytes.readUInt8(middle) ^ 0xff, middle);
    await s3.send(new PutObjectCommand({ Bucket: S3_BUCKET, Key: key, Body: bytes }));
    const failed = await waitFor(
      "the failed verification",
      async () => (await getBackup(c, NS, "delta-corrupted")).status?.verification,
      { timeoutMs: 180_000, intervalMs: 500 },
    );
    t.equal(failed.succeeded, false, "the corrupted backup fails its verification");
    t.match(failed.message, /the backup failed its checks/, `why: ${failed.message}`);
    const after = (await getBackup(c, NS, "delta-corrupted")).status;
    t.equal(after?.succeeded, true, "the backup's own status stays a success (the object was written whole)");
    t.notOk(after?.lastVerified, "no lastVerified for it");
    t.ok(
      await eventSeen(
        c,
        NS,
        "EtcdBackup",
        "delta-corrupted",
        (e) => e.type === "Warning" && e.reason === "BackupVerificationFailed",
      ),
      "a Warning Event BackupVerificationFailed",
    );
  },
);

t.test(
  "two runs of one backup, the first's lease lost before its last write: object, metadata and status are one run's",
  async (t) => {
    const redis = new Redis(cluster.redisUrl ?? "", { maxRetriesPerRequest: null });
    t.teardown(() => redis.disconnect());
    await createCluster(c, NS, "taken", { size: 1, version: V36 });
    await waitReady(c, NS, "taken", 1);
    const client = await etcdClient(c, NS, "taken");
    t.teardown(() => client.close());
    await client.put("written").value("before both runs");
    const log = silentLogger();
    const etcd = { timeoutMs: 10_000 };
    const key = (name: string) => `taken/${name}.backup`;
    // Annotated cluster-wide, so the namespaced operator of this file leaves them to the test.
    const backupNamed = async (name: string) => {
      await c.custom.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: NS,
        plural: BACKUP_PLURAL,
        body: {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: "EtcdBackup",
          metadata: { name, annotations: { [SCOPE_ANNOTATION]: SCOPE_CLUSTERWIDE } },
          spec: { etcdEndpoints: ["http://taken-client:2379"], storageType: "S3", s3: s3Section(key(name)) },
        },
      });
    };
    /** A run holding the backup's lease as the worker takes it; `beforeGuard` runs at each check. */
    const run = async (name: string, beforeGuard?: (check: number) => Promise<void>) => {
      const acquired = await acquireLease(redis, `backup/${NS}/${name}`, 3_000, {}, { reclaim: true });
      if (!("lease" in acquired)) throw new Error(`the lease on ${name} is held`);
      let checks = 0;
      const guard = async () => {
        checks += 1;
        await beforeGuard?.(checks);
        await acquired.lease.guard();
      };
      try {
        return await backupJob({ namespace: NS, name }, { kube: c.kube, log, etcd, guard });
      } finally {
        await acquired.lease.release();
      }
    };
    const consistent = async (name: string) => {
      const object = await objectBytes(key(name));
      const meta = JSON.parse((await objectBytes(`${key(name)}.meta.json`)).toString()) as {
        sha256: string;
        crc32: string;
        revision: number;
      };
      const status = (await getBackup(c, NS, name)).status;
      t.equal(meta.sha256, createHash("sha256").update(object).digest("hex"), `${name}: metadata = object`);
      t.equal(meta.crc32, crc32(object).toString(16).padStart(8, "0"), `${name}: its CRC-32 too`);
      t.equal(status?.sha256, meta.sha256, `${name}: status = metadata`);
      t.equal(status?.etcdRevision, meta.revision, `${name}: same revision in both`);
      return meta.revision;
    };

    // 1. The first run's last bytes wait for its check. Meanwhile Redis lost the lease and a second
    //    run took it (and writes after the first one's snapshot). The first run stops there: no
    //    object, metadata or status of its own, and no failure recorded for the second's backup.
    await backupNamed("taken-inflight");
    let second: Promise<BackupJobResult> | undefined;
    const firstOutcome = await run("taken-inflight", async (check) => {
      if (check !== 1) return;
      await redis.del(leaseKey(`backup/${NS}/taken-inflight`));
      await client.put("written").value("between the runs");
      const acquired = await acquireLease(redis, `backup/${NS}/taken-inflight`, 3_000, {}, { reclaim: true });
      if (!("lease" in acquired)) throw new Error("the second run could not take the lease");
      second = backupJob(
        { namespace: NS, name: "taken-inflight" },
        { kube: c.kube, log, etcd, guard: () => acquired.lease.guard() },
      ).finally(() => acquired.lease.release());
    }).then(
      () => "finished",
      (error: unknown) => error,
    );
    t.type(firstOutcome, LeaseLostError, "the first run stopped at its check");
    const secondRun = await second;
    t.equal(secondRun?.kind, "done", "the second run finished");
    const inflight = await consistent("taken-inflight");
    const inflightStatus = (await getBackup(c, NS, "taken-inflight")).status;
    t.equal(inflightStatus?.succeeded, true, "the backup is recorded as succeeded, once");
    t.notOk(
      await eventSeen(c, NS, "EtcdBackup", "taken-inflight", (e) => e.reason === "BackupFailed", 1_000),
      "no BackupFailed Event from the run that stopped",
    );
    t.equal(
      inflight,
      secondRun?.kind === "done" ? secondRun.record.revision : -1,
      `revision ${inflight}: the second run's`,
    );

    // 2. The second run did all its writes and gave the lease up before the first one's check: the
    //    first takes the lease back (no one holds it), but its put creates the key only if it is
    //    still empty, and the second's object is there: the older snapshot stops, no trace again.
    await backupNamed("taken-after");
    let secondRevision = 0;
    const outcome = await run("taken-after", async (check) => {
      if (check !== 1) return;
      await redis.del(leaseKey(`backup/${NS}/taken-after`));
      await client.put("written").value("between the runs, again");
      const done = await run("taken-after");
      if (done.kind === "done") secondRevision = done.record.revision;
    }).then(
      () => "finished",
      (error: unknown) => error,
    );
    t.type(
      outcome,
      LeaseLostError,
      "the first run stopped: the store refused to replace the second's object",
    );
    t.match(String(outcome), /another writer put an object there meanwhile/, "and says so");
    const after = await consistent("taken-after");
    t.equal(after, secondRevision, `object, metadata and status are the second run's (revision ${after})`);
    t.notOk(
      await eventSeen(c, NS, "EtcdBackup", "taken-after", (e) => e.reason === "BackupFailed", 1_000),
      "no BackupFailed Event",
    );
  },
);

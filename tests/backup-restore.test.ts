// End-to-end: backups and restores against the local control plane, a real S3-compatible store
// (versitygw, built from its Go module) and the local OSS-protocol server (real OSS cannot run
// here; see docs/local-control-plane.md). 10,000 keys go through S3 and through OSS and come back equal after the
// cluster was deleted; a periodic policy keeps exactly the newest maxBackups; bad input (wrong or
// missing credentials, an unreachable store, a missing bucket, a corrupt or truncated backup) gives
// a clear status and Event and never touches the cluster.
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import t, { type Test } from "tap";
import { waitFor } from "../infra/local/kube-wait.ts";
import { startOssServer } from "../infra/local/oss-server.ts";
import { BACKUP_PLURAL } from "../shared/api/etcd-backup.ts";
import { GROUP, PLURAL, RESTORE_ANNOTATION, VERSION } from "../shared/api/etcd-cluster.ts";
import { RESTORE_PLURAL } from "../shared/api/etcd-restore.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import {
  awsSecretData,
  createBackup,
  createRestore,
  createSecret,
  deleteCustom,
  eventSeen,
  eventsOf,
  startClusterWithStore,
  waitBackupOutcome,
  waitRestore,
} from "./helpers/backups.ts";
import { createCluster, etcdClient, getCluster, waitReady } from "./helpers/clusters.ts";
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
const { core, custom, kube } = c;
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

const s3Section = (path: string, extra: object = {}) => ({
  path: `${S3_BUCKET}/${path}`,
  awsSecret: "aws",
  endpoint: s3Store.endpoint,
  forcePathStyle: true,
  ...extra,
});
const ossSection = (path: string) => ({
  path: `${OSS_BUCKET}/${path}`,
  ossSecret: "oss",
  endpoint: oss.endpoint,
});

async function writeKeys(clusterName: string): Promise<Map<string, string>> {
  const client = await etcdClient(c, NS, clusterName);
  const written = new Map<string, string>();
  try {
    for (let i = 0; i < KEYS; i += 250) {
      await Promise.all(
        Array.from({ length: Math.min(250, KEYS - i) }, (_, j) => {
          const key = `key-${String(i + j).padStart(5, "0")}`;
          const value = `${key}:${randomBytes(12).toString("hex")}`;
          written.set(key, value);
          return client.put(key).value(value);
        }),
      );
    }
  } finally {
    client.close();
  }
  return written;
}

async function readKeys(clusterName: string): Promise<{ keys: Record<string, string>; revision: number }> {
  const client = await etcdClient(c, NS, clusterName);
  try {
    const keys = await client.getAll().prefix("key-").strings();
    const revision = Number((await client.maintenance.status()).header.revision);
    return { keys, revision };
  } finally {
    client.close();
  }
}

/** Deletes the EtcdCluster (its members and data go with it) and creates it again, empty. */
async function deleteAndRecreate(name: string, spec: object): Promise<void> {
  await custom.deleteNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: NS,
    plural: PLURAL,
    name,
  });
  await waitFor(
    `${name} and its pods to be gone`,
    async () => {
      const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
      return pods.items.length === 0 && !(await kube.getCluster(NS, name)) ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 300 },
  );
  await createCluster(c, NS, name, spec);
}

async function objectBytes(key: string): Promise<Buffer> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: S3_BUCKET, Key: key }));
  return Buffer.from((await answer.Body?.transformToByteArray()) ?? []);
}

async function listKeys(prefix: string): Promise<string[]> {
  const answer = await s3.send(new ListObjectsV2Command({ Bucket: S3_BUCKET, Prefix: prefix }));
  return (answer.Contents ?? []).map((o) => o.Key ?? "").sort();
}

/**
 * Until the restore leaves Staging: how many reads the old members answered (with the value they
 * hold) at a moment when every seed had downloaded and checked the backup already.
 */
async function oldMembersServingWhileStaging(
  name: string,
  size: number,
  key: string,
  value: string,
): Promise<number> {
  const oldPods = (await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` }))
    .items;
  const client = await etcdClient(c, NS, name);
  let served = 0;
  try {
    const deadline = Date.now() + 120_000;
    while (Date.now() < deadline) {
      const status = (await kube.getRestore(NS, name))?.status;
      if (status?.phase && !["Verifying", "Staging"].includes(status.phase)) break;
      const seeds = status?.seedMembers ?? [];
      const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` }))
        .items;
      const fetched = pods.filter(
        (p) =>
          seeds.includes(p.metadata?.name ?? "") &&
          p.status?.initContainerStatuses?.some(
            (s) => s.name === "fetch-backup" && s.state?.terminated?.exitCode === 0,
          ),
      );
      if (
        seeds.length === size &&
        fetched.length === size &&
        oldPods.every((p) => !p.metadata?.deletionTimestamp)
      ) {
        const read = await client
          .get(key)
          .string()
          .catch(() => undefined);
        if (read === value) served++;
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  } finally {
    client.close();
  }
  return served;
}

async function roundTrip(
  t: Test,
  name: string,
  size: number,
  storage: { storageType: "S3"; s3: object } | { storageType: "OSS"; oss: object },
  pod?: object,
): Promise<{ backupRevision: number }> {
  const spec = { size, version: V36, ...(pod ? { pod } : {}) };
  // Members that must stay on different nodes are restored in place (the local kubelet places
  // every pod on its one node, so both routes run here).
  const route = pod && "antiAffinity" in pod ? "InPlace" : "Staged";
  await createCluster(c, NS, name, spec);
  await waitReady(c, NS, name, size);
  const written = await writeKeys(name);
  const before = await readKeys(name);
  t.equal(Object.keys(before.keys).length, KEYS, `${KEYS} keys written`);

  await createBackup(c, NS, `${name}-backup`, { etcdEndpoints: [`http://${name}-client:2379`], ...storage });
  const status = await waitBackupOutcome(c, NS, `${name}-backup`);
  t.equal(status.succeeded, true, `backup succeeded (${status.reason ?? ""})`);
  t.ok(
    (status.etcdRevision ?? 0) >= before.revision,
    "the backup holds at least the revision after the writes",
  );
  t.ok((status.backupSize ?? 0) > 0, `backup size ${status.backupSize}`);
  t.match(status.sha256, /^[0-9a-f]{64}$/);
  t.ok(
    await eventSeen(c, NS, "EtcdBackup", `${name}-backup`, (e) => e.reason === "BackupSucceeded"),
    "a BackupSucceeded event",
  );

  await deleteAndRecreate(name, spec);
  await waitReady(c, NS, name, size);
  const wiped = await etcdClient(c, NS, name);
  await wiped.put("after-wipe").value("must not survive the restore");
  t.equal(Object.keys((await readKeys(name)).keys).length, 0, "the recreated cluster is empty");
  wiped.close();

  await createRestore(c, NS, name, {
    backupStorageType: storage.storageType,
    ...(storage.storageType === "S3" ? { s3: storage.s3 } : { oss: storage.oss }),
  });
  const served = await oldMembersServingWhileStaging(
    name,
    size,
    "after-wipe",
    "must not survive the restore",
  );
  const restore = await waitRestore(c, NS, name, "Completed");
  t.equal(restore.status?.succeeded, true);
  t.equal(restore.status?.route, route, `restored by the ${route} route`);
  const restoreEvents = await eventsOf(c, NS, "EtcdRestore", name);
  if (route === "Staged") {
    t.ok(served > 0, `the old members served (${served} reads) after every seed had fetched the backup`);
    t.ok(
      restoreEvents.some((e) => e.reason === "BackupFound") &&
        restoreEvents.some((e) => e.reason === "SeedsReady"),
      "Events say the backup was found and the seeds were ready before the old members stopped",
    );
  } else {
    t.equal(served, 0, "in place, the old members stopped before the seeds fetched anything");
    t.ok(
      restoreEvents.some((e) => e.reason === "BackupVerified"),
      "an Event says the operator verified the backup before the old members stopped",
    );
  }
  t.equal(restore.status?.sha256, status.sha256, "the restore checked the backup's checksum");
  t.match(restore.status?.crc32, /^[0-9a-f]{8}$/, "and passed its recorded CRC-32 to the new members");
  t.ok((restore.status?.restoredRevision ?? 0) >= (status.etcdRevision ?? 0), "restored revision ≥ backup's");
  await waitReady(c, NS, name, size, 120_000);
  const after = await readKeys(name);
  t.equal(Object.keys(after.keys).length, KEYS, `all ${KEYS} keys are back`);
  const mismatched = [...written].filter(([key, value]) => after.keys[key] !== value);
  t.same(mismatched, [], "every value equal");
  t.ok(
    after.revision >= (status.etcdRevision ?? 0),
    `revision ${after.revision} ≥ backed-up ${status.etcdRevision}`,
  );
  const client = await etcdClient(c, NS, name);
  t.equal(await client.get("after-wipe").string(), null, "data written after the backup is gone");
  client.close();
  t.notOk(
    (await getCluster(c, NS, name)).metadata?.annotations?.[RESTORE_ANNOTATION],
    "the restore mark is lifted",
  );
  await deleteCustom(c, NS, RESTORE_PLURAL, name);
  return { backupRevision: status.etcdRevision ?? 0 };
}

t.test(
  "10,000 keys through S3: backup, cluster deleted, restore staged beside the serving members",
  async (t) => {
    await roundTrip(t, "alpha", 3, { storageType: "S3", s3: s3Section("alpha/etcd.backup") });
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
      t,
      "beta",
      1,
      { storageType: "OSS", oss: ossSection("beta/etcd.backup") },
      { antiAffinity: true },
    );
  },
);

t.test("a periodic backup with maxBackups 3 keeps exactly the 3 newest", async (t) => {
  await createCluster(c, NS, "gamma", { size: 1, version: V36 });
  await waitReady(c, NS, "gamma", 1);
  const prefix = "gamma/etcd.backup";
  await createBackup(c, NS, "gamma-every-2s", {
    etcdEndpoints: ["http://gamma-client:2379"],
    storageType: "S3",
    s3: s3Section(prefix),
    backupPolicy: { backupIntervalInSecond: 2, maxBackups: 3 },
  });
  const seen = new Set<string>();
  const data = (keys: string[]) => keys.filter((k) => !k.endsWith(".meta.json"));
  await waitFor(
    "5 periodic backups",
    async () => {
      for (const key of data(await listKeys(`${prefix}_`))) seen.add(key);
      return seen.size >= 5 ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
  await deleteCustom(c, NS, BACKUP_PLURAL, "gamma-every-2s");
  // A run already under way finishes (and prunes); then nothing changes any more.
  let last = "";
  await waitFor(
    "the store to settle",
    async () => {
      const now = (await listKeys(`${prefix}_`)).join(",");
      const settled = now === last;
      last = now;
      return settled ? true : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 3_000 },
  );
  const remaining = data(await listKeys(`${prefix}_`));
  for (const key of remaining) seen.add(key);
  t.equal(remaining.length, 3, `exactly 3 backups remain (${seen.size} were taken)`);
  t.same(remaining, [...seen].sort().slice(-3), "the 3 newest");
  t.equal((await listKeys(`${prefix}_`)).length, 6, "each with its metadata file");
});

t.test("bad input gives a clear status and Event and touches nothing", async (t) => {
  const endpoints = ["http://alpha-client:2379"];
  const cases: { name: string; spec: object; reason: string; message: RegExp }[] = [
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
      spec: { storageType: "OSS", oss: ossSection("bad/x") },
      reason: "InvalidCredentials",
      message: /refused the credentials/,
    },
  ];
  await createSecret(c, NS, "oss-wrong", { accessKeyID: ossKey.accessKeyId, accessKeySecret: "wrong" });
  const ossCase = cases.find((x) => x.name === "oss-wrong-secret");
  if (ossCase) ossCase.spec = { storageType: "OSS", oss: { ...ossSection("bad/x"), ossSecret: "oss-wrong" } };
  for (const bad of cases) await createBackup(c, NS, bad.name, { etcdEndpoints: endpoints, ...bad.spec });
  for (const bad of cases) {
    const status = await waitBackupOutcome(c, NS, bad.name);
    t.equal(status.succeeded, false, `${bad.name}: failed`);
    const condition = status.conditions?.find((x) => x.type === "Succeeded");
    t.equal(condition?.reason, bad.reason, `${bad.name}: reason ${bad.reason}`);
    t.match(status.reason, bad.message, `${bad.name}: ${status.reason}`);
    t.ok(
      await eventSeen(
        c,
        NS,
        "EtcdBackup",
        bad.name,
        (e) => e.type === "Warning" && e.reason === "BackupFailed" && bad.message.test(e.message ?? ""),
      ),
      `${bad.name}: a BackupFailed event`,
    );
    await deleteCustom(c, NS, BACKUP_PLURAL, bad.name);
  }
  t.same(await listKeys("bad/"), [], "nothing was written for failed backups");

  // Corrupt and truncated copies of alpha's backup; a restore from them must not touch alpha.
  const original = await objectBytes("alpha/etcd.backup");
  const corrupt = Buffer.from(original);
  const middle = Math.floor(corrupt.length / 2);
  corrupt[middle] = (corrupt[middle] ?? 0) ^ 0xff;
  const put = (key: string, body: Buffer) =>
    s3.send(new PutObjectCommand({ Bucket: S3_BUCKET, Key: key, Body: body }));
  await put("bad/corrupt.db", corrupt);
  const metadata = await objectBytes("alpha/etcd.backup.meta.json");
  await put("bad/corrupt.db.meta.json", metadata);
  // A backup recorded before CRC-32s were: its seeds compare the SHA-256.
  const { crc32: _recorded, ...older } = JSON.parse(metadata.toString()) as Record<string, unknown>;
  await put("bad/corrupt-older.db", corrupt);
  await put("bad/corrupt-older.db.meta.json", Buffer.from(JSON.stringify(older)));
  await put("bad/truncated.db", original.subarray(0, middle));
  const podsBefore = (
    await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=alpha" })
  ).items
    .map((p) => p.metadata?.uid)
    .sort();
  const keysBefore = await readKeys("alpha");
  for (const [object, message] of [
    ["bad/corrupt.db", /corrupt: its CRC-32 is/],
    ["bad/corrupt-older.db", /corrupt: its SHA-256 is/],
    ["bad/truncated.db", /corrupt or truncated/],
    ["bad/missing.db", /no backup at/],
  ] as const) {
    await createRestore(c, NS, "alpha", { backupStorageType: "S3", s3: s3Section(object) });
    const restore = await waitRestore(c, NS, "alpha", "Failed");
    t.match(restore.status?.reason, message, `${object}: ${restore.status?.reason}`);
    t.ok(
      await eventSeen(
        c,
        NS,
        "EtcdRestore",
        "alpha",
        (e) => e.reason === "RestoreFailed" && message.test(e.message ?? ""),
      ),
      `${object}: a RestoreFailed event`,
    );
    await deleteCustom(c, NS, RESTORE_PLURAL, "alpha");
    await waitFor("the restore to be gone", async () =>
      (await kube.getRestore(NS, "alpha")) ? undefined : true,
    );
  }
  // The seeds of the failed restores are deleted as they fail (a second's grace): looked at until
  // they are gone. Replaced members would never match.
  const memberUids = async () =>
    (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=alpha" })).items
      .map((p) => p.metadata?.uid)
      .sort();
  const podsAfter = await waitFor(
    "only alpha's own members to be left",
    async () => {
      const uids = await memberUids();
      return JSON.stringify(uids) === JSON.stringify(podsBefore) ? uids : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 300, describe: async () => JSON.stringify(await memberUids()) },
  ).catch(() => memberUids());
  t.same(podsAfter, podsBefore, "the cluster's member pods are the same pods");
  const keysAfter = await readKeys("alpha");
  t.same(keysAfter.keys, keysBefore.keys, "and its data is unchanged");
  t.notOk((await getCluster(c, NS, "alpha")).metadata?.annotations?.[RESTORE_ANNOTATION], "no restore mark");
});

t.test("every member lost: the cluster comes back from its newest backup by itself", async (t) => {
  const before = await readKeys("alpha");
  const backup = (await kube.getBackup(NS, "alpha-backup"))?.status;
  t.ok(backup?.backupPath, `alpha has a backup at ${backup?.backupPath}`);
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=alpha" })).items;
  for (const pod of pods) {
    await core.deleteNamespacedPod({ namespace: NS, name: pod.metadata?.name ?? "", gracePeriodSeconds: 0 });
  }
  const restore = await waitFor(
    "an automatic EtcdRestore of alpha to complete",
    async () => {
      const found = await kube.getRestore(NS, "alpha");
      if (found?.status?.phase === "Failed")
        throw new Error(`the automatic restore failed: ${found.status.reason}`);
      return found?.status?.phase === "Completed" ? found : undefined;
    },
    {
      timeoutMs: 180_000,
      intervalMs: 500,
      describe: async () => JSON.stringify((await getCluster(c, NS, "alpha")).status?.conditions),
    },
  );
  t.equal(
    restore.metadata.annotations?.["etcd.database.coreos.com/created-for"],
    "all-members-lost",
    "created by the operator",
  );
  t.equal(restore.status?.backupPath, backup?.backupPath, "from the newest backup");
  const events = await eventsOf(c, NS, "EtcdCluster", "alpha");
  t.ok(
    events.some(
      (e) => e.reason === "RestoringFromBackup" && /writes after it are lost/.test(e.message ?? ""),
    ),
    "an Event says so, and what is lost",
  );
  await waitReady(c, NS, "alpha", 3, 180_000);
  const after = await readKeys("alpha");
  t.equal(Object.keys(after.keys).length, KEYS, `all ${KEYS} backed-up keys are back`);
  t.same(after.keys, before.keys, "with their values");
});

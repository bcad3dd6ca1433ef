// The backup suite, shared by the store test files and run against each store: a round trip (keys
// written into a cluster, backed up, the cluster deleted and created empty, restored, every key
// checked); a periodic policy's pruning; bad input that fails a backup and writes nothing; corrupt,
// truncated and foreign objects a restore refuses without touching the cluster; every member lost
// and the cluster brought back from its newest backup.
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import type { Test } from "tap";
import { waitFor } from "../../infra/local/kube-wait.ts";
import { BACKUP_PLURAL, type BackupStorageType } from "../../shared/api/etcd-backup.ts";
import { RESTORE_ANNOTATION } from "../../shared/api/etcd-cluster.ts";
import { RESTORE_PLURAL } from "../../shared/api/etcd-restore.ts";
import { openS3Store } from "../../shared/object-store/s3.ts";
import type { ObjectStore } from "../../shared/object-store/types.ts";
import {
  createBackup,
  createRestore,
  deleteCustom,
  eventSeen,
  eventsOf,
  waitBackupOutcome,
  waitRestore,
} from "./backups.ts";
import {
  type ClientTls,
  type ClusterClients,
  createCluster,
  deleteCluster,
  etcdClient,
  getCluster,
  waitReady,
} from "./clusters.ts";

export interface BackupTestContext {
  c: ClusterClients;
  ns: string;
  /** How many keys a round trip writes. */
  keys: number;
  /** The etcd version of the clusters. */
  version: string;
  /** For clusters that serve clients over TLS: the test's client certificate. */
  tls?: ClientTls;
  /** Spec fields every cluster of the file gets (e.g. its TLS section). */
  clusterSpec?: object;
  /** Spec fields every EtcdBackup of the file gets (e.g. clientTLSSecret). */
  backupSpec?: object;
}

/** A store as an EtcdBackup names it: the storage type and its section. */
export interface StorageUnderTest {
  storageType: BackupStorageType;
  sectionName: "s3" | "abs" | "gcs" | "oss";
  section: object;
}

/** A store under test: how a spec names a path in it, and the store opened with the test's credentials. */
export interface SuiteStore {
  storageType: BackupStorageType;
  sectionName: "s3" | "abs" | "gcs" | "oss";
  section(path: string): object;
  /** To look at what the operator wrote and to plant objects. */
  store: ObjectStore;
}

/** The local S3 store as the suite uses it: sections naming `<bucket>/<path>` with the Secret `secret`. */
export function s3SuiteStore(
  s3: { endpoint: string; accessKeyId: string; secretAccessKey: string; region: string },
  bucket: string,
  secret = "aws",
): SuiteStore {
  return {
    storageType: "S3",
    sectionName: "s3",
    section: (path) => ({
      path: `${bucket}/${path}`,
      awsSecret: secret,
      endpoint: s3.endpoint,
      forcePathStyle: true,
    }),
    store: openS3Store({
      bucket,
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, region: s3.region },
    }),
  };
}

export function under(s: SuiteStore, path: string): StorageUnderTest {
  return { storageType: s.storageType, sectionName: s.sectionName, section: s.section(path) };
}

/** EtcdBackup or EtcdRestore fields naming `path` in the store. */
function storageFields(s: SuiteStore, typeField: "storageType" | "backupStorageType", path: string) {
  return { [typeField]: s.storageType, [s.sectionName]: s.section(path) };
}

export async function bytesOf(store: ObjectStore, key: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await store.download(key)) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

export async function keysUnder(store: ObjectStore, prefix: string): Promise<string[]> {
  return (await store.list(prefix)).map((o) => o.key).sort();
}

async function memberUids(ctx: BackupTestContext, name: string): Promise<(string | undefined)[]> {
  const pods = await ctx.c.core.listNamespacedPod({
    namespace: ctx.ns,
    labelSelector: `etcd_cluster=${name}`,
  });
  return pods.items.map((p) => p.metadata?.uid).sort();
}

export async function writeKeys(ctx: BackupTestContext, clusterName: string): Promise<Map<string, string>> {
  const { c, ns: NS, keys: KEYS } = ctx;
  const client = await etcdClient(c, NS, clusterName, ctx.tls);
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

export async function readKeys(
  ctx: BackupTestContext,
  clusterName: string,
): Promise<{ keys: Record<string, string>; revision: number }> {
  const { c, ns: NS } = ctx;
  const client = await etcdClient(c, NS, clusterName, ctx.tls);
  try {
    const keys = await client.getAll().prefix("key-").strings();
    const revision = Number((await client.maintenance.status()).header.revision);
    return { keys, revision };
  } finally {
    client.close();
  }
}

/** Deletes the EtcdCluster (its members and data go with it) and creates it again, empty. */
export async function deleteAndRecreate(ctx: BackupTestContext, name: string, spec: object): Promise<void> {
  await deleteCluster(ctx.c, ctx.ns, name);
  await createCluster(ctx.c, ctx.ns, name, spec);
}

/**
 * Until the restore leaves Staging: how many reads the old members answered (with the value they
 * hold) at a moment when every seed had downloaded and checked the backup already.
 */
async function oldMembersServingWhileStaging(
  ctx: BackupTestContext,
  name: string,
  size: number,
  key: string,
  value: string,
): Promise<number> {
  const { c, ns: NS } = ctx;
  const { core, kube } = c;
  const oldPods = (await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` }))
    .items;
  const client = await etcdClient(c, NS, name, ctx.tls);
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

/**
 * 10,000 keys (ctx.keys) written, backed up to `storage`, the cluster deleted and created empty,
 * restored from the backup: every key back with its value, nothing written after the backup.
 */
export async function roundTrip(
  ctx: BackupTestContext,
  t: Test,
  name: string,
  size: number,
  storage: StorageUnderTest,
  pod?: object,
): Promise<{ backupRevision: number }> {
  const { c, ns: NS, keys: KEYS } = ctx;
  const spec = { size, version: ctx.version, ...ctx.clusterSpec, ...(pod ? { pod } : {}) };
  // Members that must stay on different nodes are restored in place (the local kubelet places
  // every pod on its one node, so both routes run here).
  const route = pod && "antiAffinity" in pod ? "InPlace" : "Staged";
  await createCluster(c, NS, name, spec);
  await waitReady(c, NS, name, size);
  const written = await writeKeys(ctx, name);
  const before = await readKeys(ctx, name);
  t.equal(Object.keys(before.keys).length, KEYS, `${KEYS} keys written`);

  const backupStorage = { storageType: storage.storageType, [storage.sectionName]: storage.section };
  await createBackup(c, NS, `${name}-backup`, {
    etcdEndpoints: [`${ctx.tls ? "https" : "http"}://${name}-client:2379`],
    ...ctx.backupSpec,
    ...backupStorage,
  });
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

  await deleteAndRecreate(ctx, name, spec);
  await waitReady(c, NS, name, size);
  const wiped = await etcdClient(c, NS, name, ctx.tls);
  await wiped.put("after-wipe").value("must not survive the restore");
  t.equal(Object.keys((await readKeys(ctx, name)).keys).length, 0, "the recreated cluster is empty");
  wiped.close();

  await createRestore(c, NS, name, {
    backupStorageType: storage.storageType,
    [storage.sectionName]: storage.section,
  });
  const served = await oldMembersServingWhileStaging(
    ctx,
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
  const after = await readKeys(ctx, name);
  t.equal(Object.keys(after.keys).length, KEYS, `all ${KEYS} keys are back`);
  const mismatched = [...written].filter(([key, value]) => after.keys[key] !== value);
  t.same(mismatched, [], "every value equal");
  t.ok(
    after.revision >= (status.etcdRevision ?? 0),
    `revision ${after.revision} ≥ backed-up ${status.etcdRevision}`,
  );
  const client = await etcdClient(c, NS, name, ctx.tls);
  t.equal(await client.get("after-wipe").string(), null, "data written after the backup is gone");
  client.close();
  t.notOk(
    (await getCluster(c, NS, name)).metadata?.annotations?.[RESTORE_ANNOTATION],
    "the restore mark is lifted",
  );
  await deleteCustom(c, NS, RESTORE_PLURAL, name);
  return { backupRevision: status.etcdRevision ?? 0 };
}

/** A periodic EtcdBackup every 2 s with maxBackups 3: after 5 were taken, exactly the 3 newest remain. */
export async function periodicKeepsNewest(
  ctx: BackupTestContext,
  t: Test,
  s: SuiteStore,
  name: string,
): Promise<void> {
  const { c, ns: NS } = ctx;
  await createCluster(c, NS, name, { size: 1, version: ctx.version });
  await waitReady(c, NS, name, 1);
  const prefix = `${name}/etcd.backup`;
  await createBackup(c, NS, `${name}-every-2s`, {
    etcdEndpoints: [`http://${name}-client:2379`],
    ...storageFields(s, "storageType", prefix),
    backupPolicy: { backupIntervalInSecond: 2, maxBackups: 3 },
  });
  const seen = new Set<string>();
  const data = (keys: string[]) => keys.filter((k) => !k.endsWith(".meta.json"));
  await waitFor(
    "5 periodic backups",
    async () => {
      for (const key of data(await keysUnder(s.store, `${prefix}_`))) seen.add(key);
      return seen.size >= 5 ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
  await deleteCustom(c, NS, BACKUP_PLURAL, `${name}-every-2s`);
  // A run already under way finishes (and prunes); then nothing changes any more.
  let last = "";
  await waitFor(
    "the store to settle",
    async () => {
      const now = (await keysUnder(s.store, `${prefix}_`)).join(",");
      const settled = now === last;
      last = now;
      return settled ? true : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 3_000 },
  );
  const remaining = data(await keysUnder(s.store, `${prefix}_`));
  for (const key of remaining) seen.add(key);
  t.equal(remaining.length, 3, `exactly 3 backups remain (${seen.size} were taken)`);
  t.same(remaining, [...seen].sort().slice(-3), "the 3 newest");
  t.equal((await keysUnder(s.store, `${prefix}_`)).length, 6, "each with its metadata file");
}

export interface BadBackup {
  name: string;
  /** storageType and its section. */
  spec: object;
  reason: string;
  message: RegExp;
}

/** Each bad backup fails with its reason, message and a BackupFailed Event; nothing lands under bad/. */
export async function badBackupsFail(
  ctx: BackupTestContext,
  t: Test,
  cases: BadBackup[],
  endpoint: string,
  store: ObjectStore,
): Promise<void> {
  const { c, ns: NS } = ctx;
  for (const bad of cases) await createBackup(c, NS, bad.name, { etcdEndpoints: [endpoint], ...bad.spec });
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
  t.same(await keysUnder(store, "bad/"), [], "nothing was written for failed backups");
}

/** An object planted in the store for a restore to refuse, and the reason it must give. */
export interface RefusedObject {
  key: string;
  /** Left out: the object does not exist. */
  body?: Buffer;
  /** The metadata file planted beside it. */
  meta?: Buffer;
  message: RegExp;
}

/**
 * Restores of `name` from a corrupt copy of its backup (with the backup's metadata: the checksum
 * differs), a truncated one, 64 KiB that are no snapshot, a missing object and `extra` ones: each
 * fails with its reason and a RestoreFailed Event, and the cluster keeps its pods and data. Staged,
 * the new members compare the recorded CRC-32 as they fetch; in place (`inPlace`), the operator
 * reads the whole backup first and compares its SHA-256.
 */
export async function refusedRestoresTouchNothing(
  ctx: BackupTestContext,
  t: Test,
  s: SuiteStore,
  name: string,
  inPlace: boolean,
  extra: (original: Buffer, metadata: Buffer) => RefusedObject[] = () => [],
): Promise<void> {
  const { c, ns: NS } = ctx;
  const original = await bytesOf(s.store, `${name}/etcd.backup`);
  const metadata = await bytesOf(s.store, `${name}/etcd.backup.meta.json`);
  const corrupt = Buffer.from(original);
  const middle = Math.floor(corrupt.length / 2);
  corrupt[middle] = (corrupt[middle] ?? 0) ^ 0xff;
  const objects: RefusedObject[] = [
    {
      key: "refused/corrupt.db",
      body: corrupt,
      meta: metadata,
      message: inPlace ? /corrupt: its SHA-256 is/ : /corrupt: its CRC-32 is/,
    },
    { key: "refused/truncated.db", body: original.subarray(0, middle), message: /corrupt or truncated/ },
    { key: "refused/not-a-snapshot.db", body: randomBytes(64 * 1024), message: /corrupt or truncated/ },
    { key: "refused/missing.db", message: /no backup at/ },
    ...extra(corrupt, metadata),
  ];
  const plant = (key: string, body: Buffer) => s.store.upload(key, Readable.from([body]), body.length);
  for (const o of objects) {
    if (o.body) await plant(o.key, o.body);
    if (o.meta) await plant(`${o.key}.meta.json`, o.meta);
  }
  const podsBefore = await memberUids(ctx, name);
  const keysBefore = await readKeys(ctx, name);
  for (const { key, message } of objects) {
    await createRestore(c, NS, name, storageFields(s, "backupStorageType", key));
    const restore = await waitRestore(c, NS, name, "Failed");
    t.match(restore.status?.reason, message, `${key}: ${restore.status?.reason}`);
    t.ok(
      await eventSeen(
        c,
        NS,
        "EtcdRestore",
        name,
        (e) => e.reason === "RestoreFailed" && message.test(e.message ?? ""),
      ),
      `${key}: a RestoreFailed event`,
    );
    await deleteCustom(c, NS, RESTORE_PLURAL, name);
    await waitFor("the restore to be gone", async () =>
      (await c.kube.getRestore(NS, name)) ? undefined : true,
    );
  }
  // The seeds of the failed restores are deleted as they fail (a second's grace): looked at until
  // they are gone. Replaced members would never match.
  const podsAfter = await waitFor(
    `only ${name}'s own members to be left`,
    async () => {
      const uids = await memberUids(ctx, name);
      return JSON.stringify(uids) === JSON.stringify(podsBefore) ? uids : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 300, describe: async () => JSON.stringify(await memberUids(ctx, name)) },
  ).catch(() => memberUids(ctx, name));
  t.same(podsAfter, podsBefore, "the cluster's member pods are the same pods");
  t.same((await readKeys(ctx, name)).keys, keysBefore.keys, "and its data is unchanged");
  t.notOk((await getCluster(c, NS, name)).metadata?.annotations?.[RESTORE_ANNOTATION], "no restore mark");
}

/** Every member pod of `name` deleted: the operator restores it from `<name>-backup`'s last object. */
export async function everyMemberLostRestored(
  ctx: BackupTestContext,
  t: Test,
  name: string,
  size: number,
): Promise<void> {
  const { c, ns: NS } = ctx;
  const before = await readKeys(ctx, name);
  const backup = (await c.kube.getBackup(NS, `${name}-backup`))?.status;
  t.ok(backup?.backupPath, `${name} has a backup at ${backup?.backupPath}`);
  const pods = (await c.core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` }))
    .items;
  for (const pod of pods) {
    await c.core.deleteNamespacedPod({
      namespace: NS,
      name: pod.metadata?.name ?? "",
      gracePeriodSeconds: 0,
    });
  }
  const restore = await waitFor(
    `an automatic EtcdRestore of ${name} to complete`,
    async () => {
      const found = await c.kube.getRestore(NS, name);
      if (found?.status?.phase === "Failed")
        throw new Error(`the automatic restore failed: ${found.status.reason}`);
      return found?.status?.phase === "Completed" ? found : undefined;
    },
    {
      timeoutMs: 180_000,
      intervalMs: 500,
      describe: async () => JSON.stringify((await getCluster(c, NS, name)).status?.conditions),
    },
  );
  t.equal(
    restore.metadata.annotations?.["etcd.database.coreos.com/created-for"],
    "all-members-lost",
    "created by the operator",
  );
  t.equal(restore.status?.backupPath, backup?.backupPath, "from the newest backup");
  const events = await eventsOf(c, NS, "EtcdCluster", name);
  t.ok(
    events.some(
      (e) => e.reason === "RestoringFromBackup" && /writes after it are lost/.test(e.message ?? ""),
    ),
    "an Event says so, and what is lost",
  );
  await waitReady(c, NS, name, size, 180_000);
  const after = await readKeys(ctx, name);
  t.equal(Object.keys(after.keys).length, ctx.keys, `all ${ctx.keys} backed-up keys are back`);
  t.same(after.keys, before.keys, "with their values");
}

// Chaos: quorum loss under a writer, with and without a recent backup. (operator-recovery covers two
// of three members lost without a backup: rebuilt from the survivor; backup-restore covers every
// member lost of a cluster at rest.) Here the writer keeps writing through it:
// - every member lost, a backup taken a moment before: the cluster comes back from the backup by
//   itself; the loss is bounded: every write acknowledged up to the backup's revision is there, only
//   writes after it may be missing, and the Event names that revision and says so;
// - then two of three lost, with that backup still there: the survivor wins over the backup, and
//   nothing acknowledged is lost;
// - every member lost and no backup: the cluster is Failed, says what to do, and nothing is
//   started in its place (no empty cluster under the old name).
import t from "tap";
import { waitFor } from "../infra/local/kube-wait.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import {
  awsSecretData,
  createBackup,
  createSecret,
  eventsOf,
  startClusterWithStore,
  waitBackupOutcome,
} from "./helpers/backups.ts";
import { endpointsOf, livePods, waitConverged } from "./helpers/chaos.ts";
import { createCluster, getCluster, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

const NS = "default";
const V36 = newestPatchOf("3.6") ?? "";
/** From the loss to a whole cluster again: the restore verifies the backup, then every member restores from it. */
const BOUND_MS = 240_000;

const {
  local,
  store,
  clients: c,
} = await startClusterWithStore({ name: "e2e-chaosquorum", bucket: "backups" }, (stop) => t.teardown(stop));
const { core } = c;
await createSecret(c, NS, "aws", awsSecretData(store));
const processes: OperatorProcess[] = [
  startOperatorProcess(local, "all", { OPERATOR_IMAGE: "localhost/etcd-operator:dev" }),
];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

async function deleteAllPods(name: string, count?: number): Promise<string[]> {
  const pods = (await livePods({ c, namespace: NS, name })).slice(0, count);
  const names = pods.map((p) => p.metadata?.name ?? "");
  await Promise.all(
    names.map((pod) => core.deleteNamespacedPod({ namespace: NS, name: pod, gracePeriodSeconds: 0 })),
  );
  return names;
}

const bk = { c, namespace: NS, name: "bk", size: 3 };

t.test("every member lost right after a backup: restored, losing only writes after the backup", async (t) => {
  await createCluster(c, NS, "bk", { size: 3, version: V36 });
  await waitReady(c, NS, "bk", 3);
  const writer = startWriter(() => endpointsOf(bk), "bk/");
  await new Promise((r) => setTimeout(r, 3_000));
  await createBackup(c, NS, "bk-backup", {
    etcdEndpoints: ["http://bk-client:2379"],
    storageType: "S3",
    s3: { path: "backups/bk/etcd.backup", awsSecret: "aws", endpoint: store.endpoint, forcePathStyle: true },
  });
  const backup = await waitBackupOutcome(c, NS, "bk-backup");
  t.equal(backup.succeeded, true, `backup taken at revision ${backup.etcdRevision}`);
  const backupRevision = backup.etcdRevision ?? 0;
  // Writes go on for a while after the backup: these are the ones a restore may lose.
  await new Promise((r) => setTimeout(r, 3_000));
  const lost = Date.now();
  const victims = await deleteAllPods("bk");
  const { acknowledged } = await writer.stop();
  const afterBackup = acknowledged.filter((w) => w.revision > backupRevision);
  t.ok(
    acknowledged.length - afterBackup.length > 10,
    `${acknowledged.length - afterBackup.length} writes up to the backup`,
  );
  t.ok(afterBackup.length > 0, `${afterBackup.length} acknowledged after it`);

  const convergeMs = await waitConverged(bk, lost, BOUND_MS);
  const missing = await missingWrites(await endpointsOf(bk), acknowledged);
  t.same(
    missing.filter((w) => w.revision <= backupRevision).map((w) => w.key),
    [],
    "every write acknowledged up to the backup's revision is there",
  );
  // The restored data ends at the snapshot's revision, which the restore reads off the restored
  // member: exactly the writes after it are gone, no more. The backup's own revision is read just
  // before its snapshot starts (a lower bound: a write can land in between), so the loss is at most
  // the writes after that, which is what the Event reports.
  const restoredRevision = (await c.kube.getRestore(NS, "bk"))?.status?.restoredRevision ?? 0;
  t.ok(restoredRevision >= backupRevision, `restored at revision ${restoredRevision}`);
  t.same(
    missing.map((w) => w.key),
    acknowledged.filter((w) => w.revision > restoredRevision).map((w) => w.key),
    `the loss is exactly the writes acknowledged after the restored revision ${restoredRevision} (${missing.length} of the ${afterBackup.length} after the backup's ${backupRevision})`,
  );
  t.comment(
    JSON.stringify({
      scenario: "all members lost, recent backup",
      victims,
      backupRevision,
      writesAcknowledged: acknowledged.length,
      writesAfterBackup: afterBackup.length,
      restoredRevision,
      writesLost: missing.length,
      convergeMs,
    }),
  );
  const restoring = (await eventsOf(c, NS, "EtcdCluster", "bk")).find(
    (e) => e.reason === "RestoringFromBackup",
  );
  t.match(
    restoring?.message,
    new RegExp(`revision ${backupRevision}\\): writes after it are lost`),
    "an Event names the backup's revision and says later writes are lost",
  );
});

t.test("two of three lost with that backup still there: the survivor wins, nothing lost", async (t) => {
  const writer = startWriter(() => endpointsOf(bk), "bk2/");
  await new Promise((r) => setTimeout(r, 3_000));
  const restoresBefore = (await eventsOf(c, NS, "EtcdCluster", "bk")).filter(
    (e) => e.reason === "RestoringFromBackup",
  ).length;
  const lost = Date.now();
  await deleteAllPods("bk", 2);
  const { acknowledged } = await writer.stop();
  const convergeMs = await waitConverged(bk, lost, BOUND_MS);
  const missing = await missingWrites(await endpointsOf(bk), acknowledged);
  t.ok(acknowledged.length > 10, `${acknowledged.length} writes acknowledged`);
  t.same(
    missing.map((w) => w.key),
    [],
    `every one is there (healed in ${convergeMs} ms)`,
  );
  const events = await eventsOf(c, NS, "EtcdCluster", "bk");
  t.ok(
    events.some((e) => e.reason === "QuorumRecovered"),
    "rebuilt from the survivor",
  );
  t.equal(
    events.filter((e) => e.reason === "RestoringFromBackup").length,
    restoresBefore,
    "and not from the backup",
  );
});

t.test("every member lost and no backup: Failed, clearly, and nothing started in its place", async (t) => {
  await createCluster(c, NS, "nb", { size: 3, version: V36 });
  await waitReady(c, NS, "nb", 3);
  await deleteAllPods("nb");
  const failed = await waitFor(
    "nb to be Failed",
    async () => {
      const cluster = await getCluster(c, NS, "nb");
      return cluster.status?.phase === "Failed" ? cluster : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );
  t.equal(failed.status?.reason, "AllMembersLost");
  const degraded = failed.status?.conditions?.find((x) => x.type === "Degraded");
  t.match(
    degraded?.message,
    /no successful EtcdBackup of this cluster exists; restore from a backup/,
    "says what to do",
  );
  t.ok(
    (await eventsOf(c, NS, "EtcdCluster", "nb")).some(
      (e) => e.reason === "AllMembersLost" && e.type === "Warning",
    ),
    "a Warning Event",
  );
  await new Promise((r) => setTimeout(r, 8_000));
  t.same(
    (await livePods({ c, namespace: NS, name: "nb" })).map((p) => p.metadata?.name),
    [],
    "no empty member was started under the old name",
  );
  t.equal((await getCluster(c, NS, "nb")).status?.phase, "Failed", "and it stays Failed");
});

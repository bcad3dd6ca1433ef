// Benchmark: backup throughput and restore time, against a reference measured in the same run.
//   node bench/backup.ts [--gib N]
// One JSON object per scenario on stdout:
//   backup:  an EtcdBackup of an N GiB keyspace to the local S3-compatible store (SeaweedFS), from
//            the request to the status saying it succeeded.
//            reference: `etcdctl snapshot save` of the same member to a local file.
//   restore: an EtcdRestore of that backup into the cluster (after it was deleted and created again),
//            from the request to Completed, then to the cluster serving again with its members.
// Runs against the local control plane; never part of the default tests.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { installCrds } from "../infra/crds.ts";
import { ensureAssets, etcdForMinor } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { startOperator } from "../infra/operator.ts";
import { GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import { loadConfig } from "../shared/config.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";
import {
  awsSecretData,
  createBackup,
  createRestore,
  createSecret,
  fillKeyspace,
  waitBackupOutcome,
  waitRestore,
} from "../tests/helpers/backups.ts";
import {
  type ClusterClients,
  createCluster,
  etcdClient,
  memberEndpoints,
  waitReady,
} from "../tests/helpers/clusters.ts";

const { values } = parseArgs({ options: { gib: { type: "string", default: "1" } } });
const bytes = Number(values.gib) * 1024 ** 3;
const NS = "default";
const VERSION_36 = newestPatchOf("3.6") ?? "";
const progress = (line: string) => process.stderr.write(`${line}\n`);

const cluster = await startLocalCluster({ name: "bench-backup", objectStore: true, log: () => {} });
const s3 = cluster.s3;
if (!s3) throw new Error("no object store");
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
await s3.createBucket("bench");
await createSecret(c, NS, "aws", awsSecretData(s3));
const operator = await startOperator({
  kc,
  config: loadConfig({ REDIS_URL: cluster.redisUrl, OPERATOR_IMAGE: "localhost/etcd-operator:bench" }),
  log: silentLogger(),
});
const scratch = mkdtempSync(join(tmpdir(), "bench-backup-"));
const mb = (n: number) => n / 1024 / 1024;

try {
  const spec = { size: 1, version: VERSION_36 };
  await createCluster(c, NS, "bench", spec);
  await waitReady(c, NS, "bench", 1);
  const client = await etcdClient(c, NS, "bench");
  await fillKeyspace(client, bytes, (written) => progress(`filled ${mb(written)} MiB`));
  client.close();

  const etcdctl = etcdForMinor(await ensureAssets({ log: () => {} }), "3.6").etcdctl;
  const [endpoint] = await memberEndpoints(c, NS, "bench");
  const file = join(scratch, "reference.db");
  let started = performance.now();
  execFileSync(etcdctl, ["--endpoints", endpoint ?? "", "snapshot", "save", file], { stdio: "ignore" });
  const referenceSeconds = (performance.now() - started) / 1000;
  const snapshotBytes = statSync(file).size;
  rmSync(file);

  started = performance.now();
  await createBackup(c, NS, "bench-backup", {
    etcdEndpoints: ["http://bench-client:2379"],
    storageType: "S3",
    s3: { path: "bench/bench.db", awsSecret: "aws", endpoint: s3.endpoint, forcePathStyle: true },
  });
  const status = await waitBackupOutcome(c, NS, "bench-backup", { timeoutMs: 1_800_000 });
  const backupSeconds = (performance.now() - started) / 1000;
  if (!status.succeeded) throw new Error(`backup failed: ${status.reason}`);
  console.log(
    JSON.stringify({
      scenario: "backup",
      bytes: status.backupSize,
      seconds: Number(backupSeconds.toFixed(2)),
      functionSeconds: status.durationSeconds,
      MiBps: Number((mb(status.backupSize ?? 0) / backupSeconds).toFixed(1)),
      reference: {
        what: "etcdctl snapshot save to local disk",
        bytes: snapshotBytes,
        seconds: Number(referenceSeconds.toFixed(2)),
        MiBps: Number((mb(snapshotBytes) / referenceSeconds).toFixed(1)),
      },
      ratio: Number((backupSeconds / referenceSeconds).toFixed(2)),
    }),
  );

  await c.custom.deleteNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: NS,
    plural: PLURAL,
    name: "bench",
  });
  await waitFor(
    "the cluster's pods to be gone",
    async () =>
      (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=bench" })).items.length ===
      0
        ? true
        : undefined,
    { timeoutMs: 60_000 },
  );
  await createCluster(c, NS, "bench", spec);
  await waitReady(c, NS, "bench", 1);
  started = performance.now();
  await createRestore(c, NS, "bench", {
    backupStorageType: "S3",
    s3: { path: "bench/bench.db", awsSecret: "aws", endpoint: s3.endpoint, forcePathStyle: true },
  });
  const restore = await waitRestore(c, NS, "bench", "Completed", 1_800_000);
  const restoreSeconds = (performance.now() - started) / 1000;
  await waitReady(c, NS, "bench", 1, 300_000);
  const servingSeconds = (performance.now() - started) / 1000;
  console.log(
    JSON.stringify({
      scenario: "restore",
      bytes: restore.status?.backupSize,
      secondsToCompleted: Number(restoreSeconds.toFixed(2)),
      secondsToServing: Number(servingSeconds.toFixed(2)),
      restoredRevision: restore.status?.restoredRevision,
    }),
  );
} finally {
  await operator.stop();
  rmSync(scratch, { recursive: true, force: true });
  await cluster.stop();
}

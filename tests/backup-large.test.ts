// End-to-end: a 1 GiB keyspace backs up to the S3-compatible store while the worker's resident
// memory grows by less than 64 MiB: the snapshot streams from etcd through the digest into a
// multipart upload and is never held whole. The worker runs as its own process (role worker), so
// its RSS is what /proc says about that process alone.
import { readFileSync } from "node:fs";
import t from "tap";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import {
  awsSecretData,
  createBackup,
  createSecret,
  fillKeyspace,
  startClusterWithStore,
  waitBackupOutcome,
} from "./helpers/backups.ts";
import { createCluster, etcdClient, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const GIB = 1024 * 1024 * 1024;
const LIMIT_MIB = 64;

const {
  local: cluster,
  store: s3,
  clients: c,
} = await startClusterWithStore({ name: "e2e-backup-big", bucket: "big" }, (stop) => t.teardown(stop));
await createSecret(c, NS, "aws", awsSecretData(s3));

const processes: OperatorProcess[] = [
  startOperatorProcess(cluster, "watcher"),
  startOperatorProcess(cluster, "scheduler"),
];
const worker = startOperatorProcess(cluster, "worker");
processes.push(worker);
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

function rssBytes(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match?.[1] ?? 0) * 1024;
}

t.test("a 1 GiB keyspace backs up with the worker's memory flat", async (t) => {
  await createCluster(c, NS, "huge", { size: 1, version: newestPatchOf("3.6") });
  await waitReady(c, NS, "huge", 1);
  const client = await etcdClient(c, NS, "huge");
  const started = Date.now();
  await fillKeyspace(client, GIB, (bytes) => t.comment(`filled ${bytes / 1024 / 1024} MiB`));
  const revision = Number((await client.maintenance.status()).header.revision);
  client.close();
  t.comment(`1 GiB written in ${((Date.now() - started) / 1000).toFixed(1)} s`);

  const pid = worker.child.pid;
  if (pid === undefined) throw new Error("the worker process has no pid");
  const baseline = rssBytes(pid);
  let peak = baseline;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssBytes(pid));
  }, 50);
  try {
    await createBackup(c, NS, "huge-backup", {
      etcdEndpoints: ["http://huge-client:2379"],
      storageType: "S3",
      s3: { path: "big/huge.db", awsSecret: "aws", endpoint: s3.endpoint, forcePathStyle: true },
    });
    const status = await waitBackupOutcome(c, NS, "huge-backup", { timeoutMs: 600_000 });
    t.equal(status.succeeded, true, `backup succeeded (${status.reason ?? ""})`);
    t.ok((status.backupSize ?? 0) >= GIB, `the backup holds ${(status.backupSize ?? 0) / GIB} GiB`);
    t.ok((status.etcdRevision ?? 0) >= revision, "at the revision after the fill");
    t.comment(`backup took ${status.durationSeconds} s`);
  } finally {
    clearInterval(sampler);
  }
  const growthMiB = (peak - baseline) / 1024 / 1024;
  t.comment(
    `worker RSS ${(baseline / 1024 / 1024).toFixed(1)} MiB → peak ${(peak / 1024 / 1024).toFixed(1)} MiB`,
  );
  t.ok(growthMiB < LIMIT_MIB, `worker RSS grew by ${growthMiB.toFixed(1)} MiB (< ${LIMIT_MIB} MiB)`);
});

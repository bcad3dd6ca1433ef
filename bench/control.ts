// Benchmark: the scale of control. Many EtcdClusters (most paused, a few live), one watcher and N
// worker processes (separate processes, as deployed):
//   node bench/control.ts [--clusters 1000] [--live 20] [--workers 2] [--rounds 3]
// Prints one JSON object:
//   - reconcilesPerSecondPerWorker: every cluster asked for a reconcile `rounds` times at once,
//     completed reconciles per second divided by the workers (goal ≥ 300);
//   - queueWaitMs p50/p99 at half that load: reconcile requests paced at half the measured rate,
//     from the request to the job becoming active (BullMQ's own events; goal p99 ≤ 20 ms);
//   - rssMiB of the watcher and each worker after the load (goal ≤ 150 each);
//   - the machine's load average.
// Runs against the local control plane; never part of the default tests.
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Queue, QueueEvents } from "bullmq";
import { Redis } from "ioredis";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import { RECONCILE_QUEUE, requestReconcile } from "../shared/queue.ts";
import { type ClusterClients, createCluster } from "../tests/helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "../tests/helpers/operator-processes.ts";

const { values } = parseArgs({
  options: {
    clusters: { type: "string", default: "1000" },
    live: { type: "string", default: "20" },
    workers: { type: "string", default: "2" },
    rounds: { type: "string", default: "3" },
  },
});
const CLUSTERS = Number(values.clusters);
const LIVE = Number(values.live);
const WORKERS = Number(values.workers);
const ROUNDS = Number(values.rounds);
const NS = "default";
const progress = (line: string) => process.stderr.write(`${line}\n`);

const cluster = await startLocalCluster({ name: "bench-control", log: () => {} });
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const clients: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
const redisUrl = cluster.redisUrl ?? "";
const redis = new Redis(redisUrl, { maxRetriesPerRequest: null });
const queue = new Queue(RECONCILE_QUEUE, { connection: redis });
const eventsConnection = new Redis(redisUrl, { maxRetriesPerRequest: null });
const events = new QueueEvents(RECONCILE_QUEUE, { connection: eventsConnection });
await events.waitUntilReady();
const processes: OperatorProcess[] = [];

function rssMiB(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Math.round(Number(match?.[1] ?? 0) / 1024);
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function drained(): Promise<void> {
  await waitFor(
    "the reconcile queue to drain",
    async () => {
      const counts = await queue.getJobCounts("waiting", "active", "delayed", "prioritized");
      return Object.values(counts).every((n) => n === 0) ? true : undefined;
    },
    { timeoutMs: 600_000, intervalMs: 100 },
  );
}

const names = Array.from({ length: CLUSTERS }, (_, i) => `c${String(i).padStart(4, "0")}`);
try {
  progress(`creating ${CLUSTERS} EtcdClusters (${LIVE} live)`);
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < names.length) {
        const index = next++;
        await createCluster(clients, NS, names[index] ?? "", {
          size: 1,
          version: newestPatchOf("3.6"),
          paused: index >= LIVE,
        });
      }
    }),
  );
  const quiet = {
    RECONCILE_INTERVAL_MS: "3600000",
    LOG_LEVEL: "warn",
    ...(process.env.WORKER_CONCURRENCY ? { WORKER_CONCURRENCY: process.env.WORKER_CONCURRENCY } : {}),
  };
  const watcher = startOperatorProcess(cluster, "watcher", quiet);
  processes.push(watcher);
  const workers = Array.from({ length: WORKERS }, () => startOperatorProcess(cluster, "worker", quiet));
  processes.push(...workers);
  progress(`waiting for the ${LIVE} live clusters to serve`);
  await waitFor(
    "the live clusters to be ready",
    async () => {
      const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: "app=etcd" });
      const ready = pods.items.filter((p) =>
        p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
      ).length;
      return ready >= LIVE ? true : undefined;
    },
    { timeoutMs: 600_000, intervalMs: 1_000 },
  );
  await drained();

  // Throughput: every cluster asked `rounds` times, as fast as the workers take them.
  let completed = 0;
  events.on("completed", () => {
    completed++;
  });
  progress(`throughput: ${ROUNDS} × ${CLUSTERS} reconcile requests`);
  const started = performance.now();
  for (let round = 0; round < ROUNDS; round++) {
    await Promise.all(names.map((name) => requestReconcile(queue, redis, NS, name, { reason: "bench" })));
    await drained();
  }
  const seconds = (performance.now() - started) / 1000;
  const perWorker = completed / seconds / WORKERS;

  // Latency at half load: requests paced at half the measured total rate.
  const rate = Math.max(1, (completed / seconds) * 0.5);
  const requestedAt = new Map<string, number>();
  const waits: number[] = [];
  events.on("active", ({ jobId }) => {
    const at = requestedAt.get(jobId);
    if (at !== undefined) {
      waits.push(performance.now() - at);
      requestedAt.delete(jobId);
    }
  });
  progress(`latency: ${rate.toFixed(0)} requests/s for 10 s`);
  const until = performance.now() + 10_000;
  let i = 0;
  while (performance.now() < until) {
    const name = names[i++ % names.length] ?? "";
    requestedAt.set(`${NS}/${name}`, performance.now());
    await requestReconcile(queue, redis, NS, name, { reason: "bench" });
    await new Promise((r) => setTimeout(r, 1000 / rate));
  }
  await drained();
  const sorted = [...waits].sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      scenario: "control",
      clusters: CLUSTERS,
      live: LIVE,
      workers: WORKERS,
      reconciles: completed,
      seconds: Number(seconds.toFixed(2)),
      reconcilesPerSecondPerWorker: Number(perWorker.toFixed(1)),
      goalPerWorker: 300,
      queueWaitMs: {
        load: `${rate.toFixed(0)} requests/s (half the measured rate)`,
        samples: sorted.length,
        p50: Number(percentile(sorted, 50).toFixed(1)),
        p99: Number(percentile(sorted, 99).toFixed(1)),
      },
      goalP99Ms: 20,
      rssMiB: { watcher: rssMiB(watcher.child.pid), workers: workers.map((w) => rssMiB(w.child.pid)) },
      goalRssMiB: 150,
      loadavg: loadavg().map((l) => Number(l.toFixed(2))),
    }),
  );
} finally {
  // SIGTERM: the processes shut down cleanly (and write their profiles when run with --cpu-prof).
  for (const p of processes) await p.kill("SIGTERM");
  await events.close();
  await queue.close();
  eventsConnection.disconnect();
  redis.disconnect();
  await cluster.stop();
}

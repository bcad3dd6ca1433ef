// Benchmark: Redis gone for minutes under a fleet of clusters, and the catch-up once it is back.
//   node bench/redis-outage.ts [--clusters 1000] [--live 20] [--down 120] [--workers 2] [--runs 1] [--save]
// One watcher, one scheduler and `workers` worker processes run against `clusters` EtcdClusters
// (`live` of them with a real member, the others paused, as in bench/control.ts). Each run stops
// Redis for `down` seconds; meanwhile every cluster's spec changes (the paused ones' size, the live
// ones' `paused`), so every one of them needs a reconcile that no one can run. Measured:
//   - catchUpMs: from Redis answering again to each cluster's status observing its new generation
//     (p50, p99, max over the clusters);
//   - during the outage: /readyz of the watcher (503 expected), its etcd_operator_redis_connected,
//     and the warning lines each process logged (a sane rate: one per connection, then one per 30 s);
//   - the herd once Redis is back: the most jobs waiting at once, kube-apiserver requests by verb
//     in the catch-up, and the CPU seconds of every operator process and Redis in it;
//   - the machine's load average.
// Runs against the local control plane; never part of the default tests.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { readPidFile } from "../infra/local/daemons.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { redisPing } from "../infra/local/redis.ts";
import type { EtcdCluster } from "../shared/api/etcd-cluster.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import { RECONCILE_QUEUE } from "../shared/queue.ts";
import { type ClusterClients, createCluster, patchSpec } from "../tests/helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "../tests/helpers/operator-processes.ts";
import { apiRequestCounts, countsSince } from "./api-requests.ts";
import { operatorBuild } from "./operator-entry.ts";
import { saveResults } from "./results.ts";
import { processCpuSeconds as cpuSeconds, keepLogs, load, summary } from "./stats.ts";

const { values } = parseArgs({
  options: {
    clusters: { type: "string", default: "1000" },
    live: { type: "string", default: "20" },
    down: { type: "string", default: "120" },
    workers: { type: "string", default: "2" },
    runs: { type: "string", default: "1" },
    save: { type: "boolean", default: false },
  },
});
const CLUSTERS = Number(values.clusters);
const LIVE = Number(values.live);
const DOWN_MS = Number(values.down) * 1000;
const WORKERS = Number(values.workers);
const RUNS = Number(values.runs);
const NS = "default";
const RESYNC_MS = 30_000;
const progress = (line: string) => process.stderr.write(`${line}\n`);

const operator = await operatorBuild(progress);
const cluster = await startLocalCluster({ name: "bench-outage", log: () => {} });
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const clients: ClusterClients = { kube: new Kube(kc), core, custom };
await installCrds(kc);
const redisUrl = cluster.redisUrl ?? "";
const redisPort = Number(new URL(redisUrl).port);
const redis = new Redis(redisUrl, { maxRetriesPerRequest: null });
redis.on("error", () => {});
const queue = new Queue(RECONCILE_QUEUE, { connection: redis });
queue.on("error", () => {});
const processes: OperatorProcess[] = [];
const names = Array.from({ length: CLUSTERS }, (_, i) => `c${String(i).padStart(4, "0")}`);
const live = (name: string) => names.indexOf(name) < LIVE;

async function inParallel<T>(
  items: readonly T[],
  work: (item: T) => Promise<void>,
  width = 16,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) {
        const item = items[next++];
        if (item !== undefined) await work(item);
      }
    }),
  );
}

async function listClusters(): Promise<EtcdCluster[]> {
  const list = (await custom.listNamespacedCustomObject({
    group: "etcd.database.coreos.com",
    version: "v1beta2",
    namespace: NS,
    plural: "etcdclusters",
  })) as { items: EtcdCluster[] };
  return list.items;
}

/** The cluster's status has looked at its current spec (every condition at its generation). */
function caughtUp(c: EtcdCluster): boolean {
  const generation = c.metadata?.generation;
  const progressing = c.status?.conditions?.find((x) => x.type === "Progressing");
  return generation !== undefined && progressing?.observedGeneration === generation;
}

async function get(url: string): Promise<{ status: number; body: string }> {
  const response = await fetch(url).catch(() => undefined);
  return { status: response?.status ?? 0, body: (await response?.text()) ?? "" };
}

/** Warning lines (level ≥ 40) each process logged between two times, by message. */
function warningsBetween(from: number, to: number): Record<string, Record<string, number>> {
  const byProcess: Record<string, Record<string, number>> = {};
  for (const p of processes) {
    const counts: Record<string, number> = {};
    for (const line of readFileSync(p.logFile, "utf8").split("\n")) {
      try {
        const entry = JSON.parse(line) as { level?: number; time?: number; msg?: string };
        if ((entry.level ?? 0) < 40 || (entry.time ?? 0) < from || (entry.time ?? 0) > to) continue;
        const msg = entry.msg ?? "";
        counts[msg] = (counts[msg] ?? 0) + 1;
      } catch {
        // Not a JSON line.
      }
    }
    byProcess[`${p.role} ${processes.filter((q) => q.role === p.role).indexOf(p) + 1}`] = counts;
  }
  return byProcess;
}

try {
  progress(`creating ${CLUSTERS} EtcdClusters (${LIVE} live)`);
  await inParallel(names, (name) =>
    createCluster(clients, NS, name, { size: 1, version: newestPatchOf("3.6"), paused: !live(name) }),
  );
  const env = {
    RECONCILE_INTERVAL_MS: String(RESYNC_MS),
    LOG_LEVEL: "warn",
    METRICS_REQUIRE_AUTH: "false",
  };
  const watcherPort = 19_499;
  processes.push(
    startOperatorProcess(cluster, "watcher", { ...env, METRICS_PORT: String(watcherPort) }, operator.entry),
    startOperatorProcess(cluster, "scheduler", { ...env, METRICS_PORT: "19498" }, operator.entry),
    ...Array.from({ length: WORKERS }, (_, i) =>
      startOperatorProcess(cluster, "worker", { ...env, METRICS_PORT: String(19_500 + i) }, operator.entry),
    ),
  );
  progress(`waiting for the ${LIVE} live clusters to serve and every cluster to be looked at`);
  await waitFor(
    "every cluster to be observed",
    async () => ((await listClusters()).every(caughtUp) ? true : undefined),
    { timeoutMs: 600_000, intervalMs: 1_000 },
  );

  const runs: Record<string, unknown>[] = [];
  for (let run = 1; run <= RUNS; run++) {
    progress(`run ${run}: Redis down for ${DOWN_MS / 1000} s`);
    const pids = new Map<string, number | undefined>([
      ...processes.map((p, i): [string, number | undefined] => [`${p.role} ${i}`, p.child.pid]),
    ]);
    const downAt = Date.now();
    const restart = cluster.restartRedis(DOWN_MS);
    await waitFor("Redis to be down", async () => ((await redisPing(redisPort)) ? undefined : true), {
      timeoutMs: 30_000,
      intervalMs: 50,
    });
    // Every cluster's spec changes while nothing can be enqueued.
    const before = new Map((await listClusters()).map((c) => [c.metadata?.name ?? "", c]));
    await inParallel(names, async (name) => {
      const c = before.get(name);
      if (live(name)) await patchSpec(clients, NS, name, { paused: !(c?.spec?.paused ?? false) });
      else await patchSpec(clients, NS, name, { size: c?.spec?.size === 2 ? 1 : 2 });
    });
    const patchedMs = Date.now() - downAt;
    await new Promise((r) => setTimeout(r, Math.max(0, DOWN_MS / 2 - patchedMs)));
    const readyz = await get(`http://127.0.0.1:${watcherPort}/readyz`);
    const metrics = await get(`http://127.0.0.1:${watcherPort}/metrics`);
    const connected = /etcd_operator_redis_connected\{connection="commands"\} (\d)/.exec(metrics.body)?.[1];
    await restart;
    const backAt = Date.now();
    const redisPid = readPidFile(join(cluster.dir, "redis.pid"))?.pid;
    const cpuBefore = new Map([...pids].map(([name, pid]) => [name, cpuSeconds(pid)]));
    const redisCpuBefore = cpuSeconds(redisPid);
    const requestsBefore = await apiRequestCounts(kc);
    progress(`run ${run}: Redis back; waiting for every cluster to catch up`);
    const caughtAt = new Map<string, number>();
    let peakWaiting = 0;
    await waitFor(
      "every cluster to catch up",
      async () => {
        const counts = await queue.getJobCounts("waiting", "prioritized");
        peakWaiting = Math.max(peakWaiting, (counts.waiting ?? 0) + (counts.prioritized ?? 0));
        const now = Date.now();
        for (const c of await listClusters()) {
          const name = c.metadata?.name ?? "";
          if (!caughtAt.has(name) && caughtUp(c)) caughtAt.set(name, now - backAt);
        }
        return caughtAt.size === names.length ? true : undefined;
      },
      { timeoutMs: 600_000, intervalMs: 250 },
    );
    const doneAt = Date.now();
    const requests = countsSince(requestsBefore, await apiRequestCounts(kc));
    const sorted = [...caughtAt.values()].sort((a, b) => a - b);
    const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
    runs.push({
      catchUpMs: { p50: at(50), p99: at(99), max: sorted.at(-1) ?? 0 },
      duringOutage: {
        readyzStatus: readyz.status,
        redisConnected: connected === undefined ? null : Number(connected),
        warnings: warningsBetween(downAt, backAt),
      },
      herd: {
        peakWaitingJobs: peakWaiting,
        apiRequests: requests,
        cpuSeconds: Object.fromEntries([
          ...[...pids].map(([name, pid]) => [
            name,
            Number((cpuSeconds(pid) - (cpuBefore.get(name) ?? 0)).toFixed(2)),
          ]),
          ["redis", Number((cpuSeconds(redisPid) - redisCpuBefore).toFixed(2))],
        ]),
      },
      catchUpWallMs: doneAt - backAt,
    });
    progress(`run ${run}: ${JSON.stringify(runs.at(-1))}`);
  }
  const catchUp = (key: "p50" | "p99" | "max") =>
    summary(runs.map((r) => (r.catchUpMs as Record<string, number>)[key] ?? 0));
  const result = {
    scenario: "redis-outage",
    setup: `${CLUSTERS} clusters (${LIVE} live), Redis down ${DOWN_MS / 1000} s, ${WORKERS} workers, resync ${RESYNC_MS / 1000} s`,
    catchUpMs: { p50: catchUp("p50"), p99: catchUp("p99"), max: catchUp("max") },
    // Catching up should take no longer than the safety net's own pass over every cluster.
    goal: { catchUpMaxMsAtMost: RESYNC_MS },
    runs,
    loadavg: load(),
  };
  console.log(JSON.stringify(result));
  if (values.save) {
    const defaults = CLUSTERS === 1000 && LIVE === 20 && WORKERS === 2 && DOWN_MS === 120_000;
    const variant = defaults
      ? ""
      : `${CLUSTERS} clusters, ${LIVE} live, ${WORKERS} workers, ${DOWN_MS / 1000} s down`;
    progress(`saved ${saveResults("redis-outage", "redis-outage", variant, [result])}`);
  }
} finally {
  for (const p of processes) await p.kill("SIGTERM");
  await queue.close();
  redis.disconnect();
  keepLogs(cluster.dir, progress);
  await cluster.stop();
}

// Benchmark: the scale of control. Many EtcdClusters (most paused, a few live), one watcher and N
// worker processes (separate processes, as deployed):
//   node bench/control.ts [--clusters 1000] [--live 20] [--workers 2] [--rounds 3] [--runs 3] [--save]
// Measures `runs` times on one set-up and prints one JSON object (median, spread and samples):
//   - reconcilesPerSecondPerWorker: every cluster asked for a reconcile `rounds` times at once,
//     completed reconciles per second divided by the workers (goal ≥ 300);
//   - queueWaitMs p50/p99 at half that load: reconcile requests paced at half the measured rate,
//     from the job entering the queue to a worker taking it (goal p99 ≤ 20 ms). Both instants are
//     Redis's own clock: the ids of BullMQ's "added" and "active" events, which Redis stamps with its
//     time in ms as the Lua scripts write them. requestToStartMs is the wider span this script sees:
//     from calling requestReconcile (three Redis round trips before the add) to hearing "active".
//   - rssMiB of the watcher and each worker after the load (goal ≤ 150 each);
//   - cpuMsPerReconcile: CPU time each process (kube-apiserver, its etcd, Redis, the watcher, the
//     workers, this script) spent during the throughput phase, per completed reconcile: where the
//     two cores go;
//   - apiRequestsPerReconcile: kube-apiserver requests by verb and resource per reconcile (last run);
//   - the machine's load average.
// Runs against the local control plane; never part of the default tests.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Queue, QueueEvents } from "bullmq";
import { Redis } from "ioredis";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { readPidFile } from "../infra/local/daemons.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import { RECONCILE_QUEUE, requestReconcile } from "../shared/queue.ts";
import { type ClusterClients, createCluster } from "../tests/helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "../tests/helpers/operator-processes.ts";
import { apiRequestCounts, countsSince } from "./api-requests.ts";
import { operatorBuild } from "./operator-entry.ts";
import { saveResults } from "./results.ts";
import { processCpuSeconds as cpuSeconds, keepLogs, load, processRssMiB, summary } from "./stats.ts";

const { values } = parseArgs({
  options: {
    clusters: { type: "string", default: "1000" },
    live: { type: "string", default: "20" },
    workers: { type: "string", default: "2" },
    rounds: { type: "string", default: "3" },
    runs: { type: "string", default: "3" },
    // Also write the figures to bench/results/control.json (see bench/results.ts).
    save: { type: "boolean", default: false },
  },
});
const CLUSTERS = Number(values.clusters);
const LIVE = Number(values.live);
const WORKERS = Number(values.workers);
const ROUNDS = Number(values.rounds);
const RUNS = Number(values.runs);
const NS = "default";
const progress = (line: string) => process.stderr.write(`${line}\n`);

const operator = await operatorBuild(progress);
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

/**
 * Where a process's resident memory is: /proc's split into anonymous and file-backed pages, and
 * V8's own account from its /metrics (heap used and reserved by space, external buffers).
 */
async function memoryOf(pid: number | undefined, port: number): Promise<Record<string, number>> {
  const mib = (bytes: number) => Number((bytes / 1024 / 1024).toFixed(1));
  const rollup = pid === undefined ? "" : readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
  const kb = (field: string) =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(rollup)?.[1] ?? 0) * 1024;
  const memory: Record<string, number> = {
    anonymous: mib(kb("Anonymous")),
    file: mib(kb("Rss") - kb("Anonymous")),
  };
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  for (const line of text.split("\n")) {
    const match =
      /^nodejs_(heap_size_used|heap_size_total|external_memory)_bytes (\S+)$/.exec(line) ??
      /^nodejs_heap_space_size_(used|total)_bytes\{space="([^"]+)"\} (\S+)$/.exec(line);
    if (!match) continue;
    if (match.length === 3) memory[match[1] ?? ""] = mib(Number(match[2]));
    else memory[`${match[2]} ${match[1]}`] = mib(Number(match[3]));
  }
  return memory;
}

/** Every process that takes part in a reconcile, by name. */
function participants(watcher: OperatorProcess, workers: OperatorProcess[]): Map<string, number | undefined> {
  const daemon = (name: string) => readPidFile(join(cluster.dir, `${name}.pid`))?.pid;
  return new Map<string, number | undefined>([
    ["kube-apiserver", daemon("kube-apiserver")],
    ["etcd (the API server's)", daemon("etcd")],
    ["redis", daemon("redis")],
    ["watcher", watcher.child.pid],
    ...workers.map((w, i): [string, number | undefined] => [`worker ${i + 1}`, w.child.pid]),
    ["bench (requests)", process.pid],
  ]);
}

/** Mean duration (ms) and count of the workers' reconciles by result and by step, from their /metrics. */
async function stepTimes(ports: number[]): Promise<Record<string, { count: number; meanMs: number }>> {
  const sums = new Map<string, { count: number; seconds: number }>();
  for (const port of ports) {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const line of text.split("\n")) {
      const match = /^etcd_operator_(step|reconcile)_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$/.exec(
        line,
      );
      if (!match) continue;
      const label = match[1] === "step" ? "step" : "result";
      const step = `${label} ${new RegExp(`${label}="([^"]*)"`).exec(match[3] ?? "")?.[1] ?? ""}`;
      const entry = sums.get(step) ?? { count: 0, seconds: 0 };
      if (match[2] === "sum") entry.seconds += Number(match[4]);
      else entry.count += Number(match[4]);
      sums.set(step, entry);
    }
  }
  return Object.fromEntries(
    [...sums].map(([step, { count, seconds }]) => [
      step,
      { count, meanMs: Number(((seconds * 1000) / Math.max(1, count)).toFixed(1)) },
    ]),
  );
}

/** The median and 99th percentile of one latency phase's samples. */
function p50p99(values: readonly number[]): { p50: number; p99: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/** No job waiting or running. A live cluster at rest keeps its job delayed to its next look. */
async function drained(): Promise<void> {
  await waitFor(
    "the reconcile queue to drain",
    async () => {
      const counts = await queue.getJobCounts("waiting", "active", "prioritized");
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
    // BENCH_LOG_LEVEL=debug shows, e.g., the memory keeper's collections (with BENCH_KEEP_LOGS).
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? "warn",
    ...(process.env.WORKER_CONCURRENCY ? { WORKER_CONCURRENCY: process.env.WORKER_CONCURRENCY } : {}),
  };
  const watcherPort = 19_399;
  const watcher = startOperatorProcess(
    cluster,
    "watcher",
    { ...quiet, METRICS_PORT: String(watcherPort), METRICS_REQUIRE_AUTH: "false" },
    operator.entry,
  );
  processes.push(watcher);
  // Each worker serves its own /metrics, where the step durations are read from.
  const metricsPorts = Array.from({ length: WORKERS }, (_, i) => 19_400 + i);
  const workers = metricsPorts.map((port) =>
    startOperatorProcess(
      cluster,
      "worker",
      { ...quiet, METRICS_PORT: String(port), METRICS_REQUIRE_AUTH: "false" },
      operator.entry,
    ),
  );
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

  let completed = 0;
  events.on("completed", () => {
    completed++;
  });
  const requestedAt = new Map<string, number>();
  /** Redis's time (ms) of each pending job's "added" event. */
  const addedAt = new Map<string, number>();
  /** A stream entry id is "<Redis time in ms>-<sequence>". */
  const streamMs = (id: string) => Number(id.split("-")[0]);
  let waits: number[] = [];
  let requestToStart: number[] = [];
  const slow: [string, number][] = [];
  // Every wait of the latency phases as [epoch ms of the request, wait ms]: with BENCH_WAITS_FILE
  // set, written there, to line slow waits up with the operator's logs (pino's `time`), e.g. the
  // memory keeper's collections at LOG_LEVEL=debug.
  const timeline: [number, number][] = [];
  events.on("added", ({ jobId }, id) => {
    if (requestedAt.has(jobId)) addedAt.set(jobId, streamMs(id));
  });
  events.on("active", ({ jobId }, id) => {
    const at = requestedAt.get(jobId);
    const added = addedAt.get(jobId);
    if (at !== undefined && added !== undefined) {
      const wait = streamMs(id) - added;
      waits.push(wait);
      requestToStart.push(performance.now() - at);
      slow.push([jobId, wait]);
      timeline.push([Math.round(performance.timeOrigin + at), wait]);
    }
    requestedAt.delete(jobId);
    addedAt.delete(jobId);
  });
  const processesByName = participants(watcher, workers);
  const perRun = {
    perWorker: [] as number[],
    p50: [] as number[],
    p99: [] as number[],
    requestToStartP50: [] as number[],
    requestToStartP99: [] as number[],
    cpu: [] as Record<string, number>[],
    requests: [] as Record<string, number>[],
    slowest: [] as { job: string; ms: number }[],
  };
  for (let run = 0; run < RUNS; run++) {
    // Throughput: every cluster asked `rounds` times, as fast as the workers take them.
    completed = 0;
    progress(`run ${run + 1}/${RUNS} throughput: ${ROUNDS} × ${CLUSTERS} reconcile requests`);
    const cpuBefore = new Map([...processesByName].map(([name, pid]) => [name, cpuSeconds(pid)]));
    const requestsBefore = await apiRequestCounts(kc);
    const started = performance.now();
    for (let round = 0; round < ROUNDS; round++) {
      await Promise.all(names.map((name) => requestReconcile(queue, redis, NS, name, { reason: "bench" })));
      await drained();
    }
    const seconds = (performance.now() - started) / 1000;
    const done = completed;
    perRun.perWorker.push(done / seconds / WORKERS);
    perRun.requests.push(countsSince(requestsBefore, await apiRequestCounts(kc), done));
    perRun.cpu.push(
      Object.fromEntries(
        [...processesByName].map(([name, pid]) => [
          name,
          Number((((cpuSeconds(pid) - (cpuBefore.get(name) ?? 0)) * 1000) / done).toFixed(2)),
        ]),
      ),
    );

    // Latency at half load: requests paced at half the measured total rate.
    const rate = Math.max(1, (done / seconds) * 0.5);
    waits = [];
    requestToStart = [];
    progress(`run ${run + 1}/${RUNS} latency: ${rate.toFixed(0)} requests/s for 10 s`);
    const until = performance.now() + 10_000;
    let i = 0;
    while (performance.now() < until) {
      const name = names[i++ % names.length] ?? "";
      requestedAt.set(`${NS}/${name}`, performance.now());
      await requestReconcile(queue, redis, NS, name, { reason: "bench" });
      await new Promise((r) => setTimeout(r, 1000 / rate));
    }
    await drained();
    const queued = p50p99(waits);
    perRun.p50.push(queued.p50);
    perRun.p99.push(queued.p99);
    const spans = p50p99(requestToStart);
    perRun.requestToStartP50.push(spans.p50);
    perRun.requestToStartP99.push(spans.p99);
    perRun.slowest = slow
      .sort((a, b) => b[1] - a[1])
      .slice(0, 5)
      .map(([job, ms]) => ({ job, ms: Number(ms.toFixed(1)) }));
    slow.length = 0;
  }
  if (process.env.BENCH_WAITS_FILE) writeFileSync(process.env.BENCH_WAITS_FILE, JSON.stringify(timeline));
  const cpuMsPerReconcile = Object.fromEntries(
    [...processesByName.keys()].map((name) => [
      name,
      summary(
        perRun.cpu.map((c) => c[name] ?? 0),
        2,
      ).median,
    ]),
  );
  const result = {
    scenario: "control",
    operatorBuild: operator.build,
    clusters: CLUSTERS,
    live: LIVE,
    workers: WORKERS,
    workerConcurrency: Number(process.env.WORKER_CONCURRENCY ?? 32),
    runs: RUNS,
    reconcilesPerSecondPerWorker: summary(perRun.perWorker, 1),
    goalPerWorker: 300,
    queueWaitMs: {
      load: "half the measured rate",
      p50: summary(perRun.p50, 1),
      p99: summary(perRun.p99, 1),
      slowestInLastRun: perRun.slowest,
    },
    requestToStartMs: {
      what: "from calling requestReconcile to this script hearing the job's active event",
      p50: summary(perRun.requestToStartP50, 1),
      p99: summary(perRun.requestToStartP99, 1),
    },
    goalP99Ms: 20,
    rssMiB: {
      watcher: processRssMiB(watcher.child.pid),
      workers: workers.map((w) => processRssMiB(w.child.pid)),
    },
    goalRssMiB: 150,
    memoryMiB: {
      watcher: await memoryOf(watcher.child.pid, watcherPort),
      workers: await Promise.all(workers.map((w, i) => memoryOf(w.child.pid, metricsPorts[i] ?? 0))),
    },
    cpuMsPerReconcile: {
      ...cpuMsPerReconcile,
      total: Number(
        Object.values(cpuMsPerReconcile)
          .reduce((a, b) => a + b, 0)
          .toFixed(2),
      ),
    },
    apiRequestsPerReconcile: perRun.requests.at(-1),
    stepsRun: await stepTimes(metricsPorts),
    loadavg: load(),
  };
  console.log(JSON.stringify(result));
  if (values.save) {
    const defaults = CLUSTERS === 1000 && LIVE === 20 && WORKERS === 2;
    const variant = defaults ? "" : `${CLUSTERS} clusters, ${LIVE} live, ${WORKERS} workers`;
    progress(`saved ${saveResults("control", "control", variant, [result])}`);
  }
} finally {
  // SIGTERM: the processes shut down cleanly (and write their profiles when run with --cpu-prof).
  for (const p of processes) await p.kill("SIGTERM");
  await events.close();
  await queue.close();
  eventsConnection.disconnect();
  redis.disconnect();
  keepLogs(cluster.dir, progress);
  await cluster.stop();
}

// Prometheus metrics of the operator process (prom-client). Counters and histograms that code
// records as it works (reconciles, steps, queue wait, admission reviews, HTTP requests) live in one
// registry per process, as Prometheus client libraries expect: each process (an `all` operator,
// a worker, the HTTP server) exposes what it did itself. Gauges that describe the world (members
// per cluster, backup age, queue depth) are computed when scraped (infra/http/metrics-collectors.ts),
// so they are right in whichever process serves /metrics.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export const METRIC_PREFIX = "etcd_operator_";

/** Seconds: a step is milliseconds to tens of seconds (a member joining, a leader moving). */
const STEP_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Seconds a new request waits for a worker: should be near zero; minutes mean too few workers. */
const WAIT_BUCKETS = [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300];

export interface OperatorMetrics {
  registry: Registry;
  reconciles: Counter<"result">;
  reconcileSeconds: Histogram<"result">;
  steps: Counter<"step" | "result">;
  stepSeconds: Histogram<"step" | "result">;
  queueWaitSeconds: Histogram<"queue">;
  admissionReviews: Counter<"resource" | "operation" | "allowed">;
  httpRequests: Counter<"method" | "route" | "status">;
  chaosKills: Counter<"namespace" | "cluster">;
  defragmentations: Counter<"result">;
  defragmentationSeconds: Histogram<"result">;
  spaceRecoveries: Counter<"result">;
  quickLooks: Counter<"result">;
  redisConnected: Gauge<"connection">;
  redisDisconnects: Counter<"connection">;
}

/** How often the event loop's delay is sampled for nodejs_eventloop_lag_*. */
export const EVENT_LOOP_SAMPLE_MS = 500;

function create(): OperatorMetrics {
  const registry = new Registry();
  // prom-client samples the event loop's delay with a libuv timer at this resolution; its default
  // of 10 ms woke an idle process 100 times a second, most of its CPU at rest.
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const registers = [registry];
  return {
    registry,
    reconciles: new Counter({
      name: `${METRIC_PREFIX}reconcile_total`,
      help: "Reconciles run, by result: step (a step ran), paused, invalid (spec refused), gone, error, lease_lost.",
      labelNames: ["result"],
      registers,
    }),
    reconcileSeconds: new Histogram({
      name: `${METRIC_PREFIX}reconcile_duration_seconds`,
      help: "Time of one reconcile (observe the world, plan, run one step, write status), by result.",
      labelNames: ["result"],
      buckets: STEP_BUCKETS,
      registers,
    }),
    steps: new Counter({
      name: `${METRIC_PREFIX}step_total`,
      help: "Planner steps run, by step (seed, add-member, wait, steady, …) and result (ok, error; unknown step on error).",
      labelNames: ["step", "result"],
      registers,
    }),
    stepSeconds: new Histogram({
      name: `${METRIC_PREFIX}step_duration_seconds`,
      help: "Time of one reconcile that ran a step, by step and result.",
      labelNames: ["step", "result"],
      buckets: STEP_BUCKETS,
      registers,
    }),
    queueWaitSeconds: new Histogram({
      name: `${METRIC_PREFIX}queue_wait_seconds`,
      help: "Time from a new job being due (enqueued, or its delay over) to a worker starting it, by queue.",
      labelNames: ["queue"],
      buckets: WAIT_BUCKETS,
      registers,
    }),
    admissionReviews: new Counter({
      name: `${METRIC_PREFIX}admission_reviews_total`,
      help: "Admission reviews answered by the validating webhook, by resource, operation and whether allowed.",
      labelNames: ["resource", "operation", "allowed"],
      registers,
    }),
    httpRequests: new Counter({
      name: `${METRIC_PREFIX}http_requests_total`,
      help: "HTTP requests answered, by method, route template and status code.",
      labelNames: ["method", "route", "status"],
      registers,
    }),
    chaosKills: new Counter({
      name: `${METRIC_PREFIX}chaos_kills_total`,
      help: "Member pods deleted by chaos mode (CHAOS_LEVEL > 0), by cluster; only clusters that opted in.",
      labelNames: ["namespace", "cluster"],
      registers,
    }),
    defragmentations: new Counter({
      name: `${METRIC_PREFIX}defragmentations_total`,
      help: "Member defragmentations run by the operator (on its threshold, or recovering from NOSPACE), by result (ok, error).",
      labelNames: ["result"],
      registers,
    }),
    defragmentationSeconds: new Histogram({
      name: `${METRIC_PREFIX}defragmentation_duration_seconds`,
      help: "How long one member was blocked by a defragmentation, by result.",
      labelNames: ["result"],
      buckets: STEP_BUCKETS,
      registers,
    }),
    spaceRecoveries: new Counter({
      name: `${METRIC_PREFIX}space_recoveries_total`,
      help: "Recoveries from etcd's NOSPACE alarm (compact, defragment, disarm), by result: recovered, still_full (the data alone fills the quota), error.",
      labelNames: ["result"],
      registers,
    }),
    quickLooks: new Counter({
      name: `${METRIC_PREFIX}quick_looks_total`,
      help: "Periodic looks at a cluster at rest that asked one member instead of observing it in full, by result: same (nothing differed from the last full look), changed (a full look followed).",
      labelNames: ["result"],
      registers,
    }),
    redisConnected: new Gauge({
      name: `${METRIC_PREFIX}redis_connected`,
      help: "1 while the process's Redis connection (commands, worker, backups, http) is ready, 0 while it is not.",
      labelNames: ["connection"],
      registers,
    }),
    redisDisconnects: new Counter({
      name: `${METRIC_PREFIX}redis_disconnects_total`,
      help: "Times a Redis connection of the process was lost (an outage, a restart, a Sentinel failover), by connection.",
      labelNames: ["connection"],
      registers,
    }),
  };
}

let processMetrics: OperatorMetrics | undefined;

/** The process's metrics, created on first use (prom-client allows one metric of a name per registry). */
export function operatorMetrics(): OperatorMetrics {
  processMetrics ??= create();
  return processMetrics;
}

export function countQuickLook(same: boolean): void {
  operatorMetrics().quickLooks.inc({ result: same ? "same" : "changed" });
}

/** What the worker's reconcile returns, structurally (shared/ does not import functions/). */
export interface ReconcileOutcomeLike {
  kind: string;
  step?: { kind: string };
}

/** What the worker knows about a job when it starts it (a BullMQ Job, structurally). */
export interface JobTiming {
  timestamp: number;
  processedOn?: number;
  attemptsStarted?: number;
  opts: { delay?: number };
}

/**
 * Records the queue wait of a job started for the first time: from when it was due (added, plus its
 * initial delay) to now. Later starts of the same job follow a step's own "look again in N ms"
 * delay; BullMQ does not keep when that delay was set, so they are not measured.
 */
export function recordQueueWait(queue: string, job: JobTiming, nowMs = Date.now()): void {
  if ((job.attemptsStarted ?? 1) > 1) return;
  const dueAt = job.timestamp + (job.opts.delay ?? 0);
  const startedAt = job.processedOn ?? nowMs;
  operatorMetrics().queueWaitSeconds.observe({ queue }, Math.max(0, startedAt - dueAt) / 1000);
}

function errorResult(error: unknown): string {
  return error instanceof Error && error.name === "LeaseLostError" ? "lease_lost" : "error";
}

/**
 * Runs one reconcile and records its count and duration by result, and by step when it ran one.
 * The worker wraps its call with this; the reconcile's own result or error passes through unchanged.
 */
export async function measureReconcile<T extends ReconcileOutcomeLike>(
  queue: string,
  job: JobTiming,
  run: () => Promise<T>,
): Promise<T> {
  const metrics = operatorMetrics();
  recordQueueWait(queue, job);
  const started = performance.now();
  const seconds = () => (performance.now() - started) / 1000;
  try {
    const result = await run();
    const elapsed = seconds();
    metrics.reconciles.inc({ result: result.kind });
    metrics.reconcileSeconds.observe({ result: result.kind }, elapsed);
    if (result.step) {
      metrics.steps.inc({ step: result.step.kind, result: "ok" });
      metrics.stepSeconds.observe({ step: result.step.kind, result: "ok" }, elapsed);
    }
    return result;
  } catch (error) {
    const elapsed = seconds();
    const result = errorResult(error);
    metrics.reconciles.inc({ result });
    metrics.reconcileSeconds.observe({ result }, elapsed);
    // The planner's choice is not known when the reconcile throws (observing or the step failed).
    metrics.steps.inc({ step: "unknown", result });
    metrics.stepSeconds.observe({ step: "unknown", result }, elapsed);
    throw error;
  }
}

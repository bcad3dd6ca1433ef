// The worker host: takes reconcile jobs from BullMQ and runs the reconcile function, one cluster
// at a time per cluster (jobId per cluster + the Redis lease), many clusters in parallel.
// - A step that must wait returns "check again in N ms": the job is moved to delayed, no sleep.
// - A finished step chains: the job is delayed by 0 ms, so the next step starts at once.
// - An invalid spec fails the job without retry (UnrecoverableError); other errors retry with
//   exponential backoff; the resync scheduler is the safety net behind both.
import { DelayedError, type Job, type Queue, UnrecoverableError, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { reconcile } from "../functions/reconcile.ts";
import type { OperatorConfig } from "../shared/config.ts";
import type { Kube } from "../shared/kube.ts";
import { acquireLease, LeaseLostError } from "../shared/lease.ts";
import type { Logger } from "../shared/log.ts";
import { lookKey, lookRecord, parseLookRecord, quickLook } from "../shared/look.ts";
import { countQuickLook, measureReconcile } from "../shared/metrics.ts";
import { delayJob, type PromptDelays, promptDelays } from "../shared/prompt-delay.ts";
import {
  dirtyKey,
  ensureReconcile,
  IDLE_POLL_SECONDS,
  isReconcilePayload,
  RECONCILE_QUEUE,
  RESYNC_JOB,
  requestReconcile,
} from "../shared/queue.ts";
import { floorKey } from "../shared/read-floor.ts";
import { leaseReplicas } from "../shared/redis-connection.ts";
import type { RedisHealth } from "../shared/redis-health.ts";
import { inScope } from "../shared/scope.ts";
import { resyncBackups } from "./backup-schedules.ts";

export interface WorkerDeps {
  kube: Kube;
  /** For leases and dirty marks (and the queue handle for resync). */
  redis: Redis;
  /** A dedicated connection for the BullMQ Worker (it blocks on it). */
  connection: Redis;
  queue: Queue;
  /** The backup queue: the resync also keeps backup schedules and restore jobs in step. */
  backupQueue?: Queue;
  config: OperatorConfig;
  log: Logger;
  /** The worker connection's health: its errors while Redis is down are reported there, rate-limited. */
  redisHealth?: RedisHealth;
}

/**
 * Delays the job to its next look, unless an event came meanwhile. An event's request that finds
 * the job still active only marks the cluster dirty, and the lease's release saw no mark: it came
 * after that and before the job was delayed, and would wait a whole look interval. The mark is
 * looked at again once the job is delayed (a later request finds it delayed and promotes it).
 */
async function delayUnlessDirty(
  delays: PromptDelays,
  job: Job,
  token: string | undefined,
  ms: number,
  redis: Redis,
  dirty: string,
): Promise<never> {
  await delays.delay(job, token, ms);
  if ((await redis.exists(dirty)) === 1) await job.promote().catch(() => undefined);
  throw new DelayedError();
}

/**
 * Makes sure every cluster in scope has its job (one that was lost is added; one that waits is left
 * to its time); the job of the resync scheduler. Returns how many were added.
 */
export async function resyncAll(deps: Pick<WorkerDeps, "kube" | "queue" | "config">): Promise<number> {
  const clusters = await deps.kube.listClusters(deps.config.clusterWide ? undefined : deps.config.namespace);
  let added = 0;
  for (const cluster of clusters) {
    if (!inScope(cluster, deps.config)) continue;
    const namespace = cluster.metadata?.namespace ?? "";
    const name = cluster.metadata?.name ?? "";
    if (await ensureReconcile(deps.queue, namespace, name, "resync")) added++;
  }
  return added;
}

/** When a cluster at rest is looked at next: the interval, spread ±25% so clusters do not bunch up. */
export function nextLookMs(config: Pick<OperatorConfig, "reconcileIntervalMs">): number {
  return Math.round(config.reconcileIntervalMs * (0.75 + Math.random() * 0.5));
}

export function createProcessor(deps: WorkerDeps, delays: PromptDelays = promptDelays()) {
  const leaseOptions = { replicas: leaseReplicas(deps.config) };
  // Which member a quick look asks: each in its turn.
  let turn = 0;
  let lastUnreplicatedWarning = 0;
  return async (job: Job, token?: string): Promise<unknown> => {
    if (job.name === RESYNC_JOB) {
      const enqueued = await resyncAll(deps);
      if (deps.backupQueue) await resyncBackups(deps.kube, deps.backupQueue, deps.config);
      return { enqueued };
    }
    if (!isReconcilePayload(job.data))
      throw new UnrecoverableError(`invalid reconcile payload: ${JSON.stringify(job.data)}`);
    const { namespace, name } = job.data;
    const key = `${namespace}/${name}`;
    const log = deps.log.child({ cluster: key, job: job.id, attempt: job.attemptsMade + 1 });

    const dirty = dirtyKey(namespace, name);
    const look = lookKey(key);
    // With the lease, in one round trip: the dirty mark is cleared (events from now on set it
    // again; we look at it when done), the cluster's read floor is read (shared/read-floor.ts) and
    // so is the record of its last full look.
    const acquired = await acquireLease(
      deps.redis,
      key,
      deps.config.leaseTtlMs,
      {
        clear: dirty,
        read: floorKey(key),
        alsoRead: look,
        check: dirty,
      },
      leaseOptions,
    );
    if ("heldForMs" in acquired) {
      log.debug({ heldForMs: acquired.heldForMs }, "another worker holds the cluster; retrying later");
      return delayJob(delays, job, token, Math.min(acquired.heldForMs, 1_000));
    }
    if (!acquired.replicated && Date.now() - lastUnreplicatedWarning > 60_000) {
      // The step runs all the same: its guard() stops it at the next change if a failover loses
      // the lease; refusing would stop every cluster's healing while a replica is down.
      lastUnreplicatedWarning = Date.now();
      log.warn(
        { replicas: leaseOptions.replicas },
        "no Redis replica acknowledged the cluster's lease; a failover now could hand the cluster to a second worker (reported at most once a minute)",
      );
    }
    const { lease } = acquired;
    // No event since the last look and a steady full look recently: one member's Status will do.
    const record = acquired.cleared ? undefined : parseLookRecord(acquired.alsoRead);
    if (record && Date.now() < record.dueMs) {
      const difference = await quickLook(record, turn++, { timeoutMs: deps.config.etcdTimeoutMs });
      countQuickLook(difference === undefined);
      if (difference === undefined) {
        const dirtyAgain = await lease.release();
        if (dirtyAgain) return delayJob(delays, job, token, 0);
        return delayUnlessDirty(delays, job, token, nextLookMs(deps.config), deps.redis, dirty);
      }
      log.debug({ difference }, "the quick look found a change; looking in full");
    }
    let requeueAfterMs: number | undefined;
    let dirtyAgain = true;
    try {
      // Metrics: queue wait, count and duration by result and step (shared/metrics.ts).
      const result = await measureReconcile(RECONCILE_QUEUE, job, () =>
        reconcile(
          { namespace, name, notOlderThan: acquired.read },
          {
            kube: deps.kube,
            log,
            etcd: { timeoutMs: deps.config.etcdTimeoutMs },
            guard: () => lease.guard(),
            unhealthyGraceMs: deps.config.memberUnhealthyGraceMs,
            operatorImage: deps.config.operatorImage,
          },
        ),
      );
      if (result.kind === "invalid") {
        throw new UnrecoverableError(`invalid spec: ${result.problems.join("; ")}`);
      }
      if (result.kind === "blocked") {
        log.info({ reason: result.reason, problems: result.problems }, "reconcile blocked");
        requeueAfterMs = result.requeueAfterMs;
      }
      if (result.kind === "step") {
        const why =
          result.step.kind === "wait" ? { reason: result.step.reason, message: result.step.message } : {};
        log.debug(
          { step: result.step.kind, requeueAfterMs: result.outcome.requeueAfterMs, ...why },
          "step done",
        );
        requeueAfterMs = result.outcome.requeueAfterMs;
      }
      // A steady cluster keeps its job, delayed to its next look; its record lets quick looks
      // stand in for full ones until it is due. Anything else drops the record.
      const steady = result.kind === "step" && result.step.kind === "steady";
      const next =
        steady && result.steadyStatuses && deps.config.fullLookIntervalMs > deps.config.reconcileIntervalMs
          ? lookRecord(result.steadyStatuses, {
              nowMs: Date.now(),
              fullLookIntervalMs: deps.config.fullLookIntervalMs,
            })
          : undefined;
      if (next) await deps.redis.set(look, JSON.stringify(next), "PX", deps.config.fullLookIntervalMs * 2);
      else if (acquired.alsoRead !== undefined) await deps.redis.del(look);
      if (steady) requeueAfterMs = nextLookMs(deps.config);
    } catch (error) {
      if (error instanceof LeaseLostError) {
        log.warn("lease lost mid-step; the new holder finishes the work");
        return delayJob(delays, job, token, 1_000);
      }
      throw error;
    } finally {
      dirtyAgain = await lease.release();
    }
    if (dirtyAgain) requeueAfterMs = 0;
    if (requeueAfterMs !== undefined)
      return requeueAfterMs > 0
        ? delayUnlessDirty(delays, job, token, requeueAfterMs, deps.redis, dirty)
        : delayJob(delays, job, token, 0);
    return { steady: true };
  };
}

export function startWorker(deps: WorkerDeps): Worker {
  const delays = promptDelays();
  const worker = new Worker(RECONCILE_QUEUE, createProcessor(deps, delays), {
    connection: deps.connection,
    concurrency: deps.config.workerConcurrency,
    // A killed worker's job is handed on after the lock lapses; steps are idempotent, so a
    // stalled job is retried as often as it takes (the lease prevents overlap).
    lockDuration: 10_000,
    stalledInterval: 5_000,
    maxStalledCount: 1_000,
    // A new job wakes an idle worker at once; between jobs it asks Redis again only this often.
    drainDelay: IDLE_POLL_SECONDS,
  });
  worker.on("closing", () => delays.close());
  worker.on("failed", (job, error) => {
    deps.log.warn({ job: job?.id, err: error, attemptsMade: job?.attemptsMade }, "reconcile job failed");
  });
  // A job that ends (paused, gone) has no next look. An event whose request found it still active
  // only marked the cluster dirty: once the job is completed, such a mark asks again.
  worker.on("completed", (job) => {
    if (!isReconcilePayload(job.data)) return;
    const { namespace, name } = job.data;
    deps.redis
      .exists(dirtyKey(namespace, name))
      .then((dirty) =>
        dirty === 1
          ? requestReconcile(deps.queue, deps.redis, namespace, name, { reason: "changed as its job ended" })
          : undefined,
      )
      .catch((error: unknown) =>
        deps.log.warn({ err: error, cluster: `${namespace}/${name}` }, "could not look at the dirty mark"),
      );
  });
  worker.on("error", (error) => {
    if (deps.redisHealth && !deps.redisHealth.connected()) deps.redisHealth.error(error);
    else deps.log.error({ err: error }, "worker error");
  });
  return worker;
}

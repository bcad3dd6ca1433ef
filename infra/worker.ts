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
import { measureReconcile } from "../shared/metrics.ts";
import {
  dirtyKey,
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

async function delay(job: Job, token: string | undefined, ms: number): Promise<never> {
  await job.moveToDelayed(Date.now() + Math.max(0, ms), token);
  throw new DelayedError();
}

/** Enqueues every cluster in scope; the job of the resync scheduler. */
export async function resyncAll(
  deps: Pick<WorkerDeps, "kube" | "redis" | "queue" | "config">,
): Promise<number> {
  const clusters = await deps.kube.listClusters(deps.config.clusterWide ? undefined : deps.config.namespace);
  let count = 0;
  for (const cluster of clusters) {
    if (!inScope(cluster, deps.config)) continue;
    await requestReconcile(
      deps.queue,
      deps.redis,
      cluster.metadata?.namespace ?? "",
      cluster.metadata?.name ?? "",
      {
        reason: "resync",
        delayMs: 0,
      },
    );
    count++;
  }
  return count;
}

export function createProcessor(deps: WorkerDeps) {
  const leaseOptions = { replicas: leaseReplicas(deps.config) };
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
    // With the lease, in one round trip: the dirty mark is cleared (events from now on set it
    // again; we look at it when done) and the cluster's read floor is read (shared/read-floor.ts).
    const acquired = await acquireLease(
      deps.redis,
      key,
      deps.config.leaseTtlMs,
      {
        clear: dirty,
        read: floorKey(key),
        check: dirty,
      },
      leaseOptions,
    );
    if ("heldForMs" in acquired) {
      log.debug({ heldForMs: acquired.heldForMs }, "another worker holds the cluster; retrying later");
      return delay(job, token, Math.min(acquired.heldForMs, 1_000));
    }
    if (!acquired.replicated && Date.now() - lastUnreplicatedWarning > 60_000) {
      // The step runs all the same: its guard() stops it at the next change if a failover loses
      // the lease; refusing would stop every cluster's healing while a replica is down.
      lastUnreplicatedWarning = Date.now();
      log.warn(
        { replicas: leaseOptions.replicas },
        "no Redis replica acknowledged the cluster's lease within 500 ms; a failover now could hand the cluster to a second worker (reported at most once a minute)",
      );
    }
    const { lease } = acquired;
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
    } catch (error) {
      if (error instanceof LeaseLostError) {
        log.warn("lease lost mid-step; the new holder finishes the work");
        return delay(job, token, 1_000);
      }
      throw error;
    } finally {
      dirtyAgain = await lease.release();
    }
    if (dirtyAgain) requeueAfterMs = 0;
    if (requeueAfterMs !== undefined) return delay(job, token, requeueAfterMs);
    return { steady: true };
  };
}

export function startWorker(deps: WorkerDeps): Worker {
  const worker = new Worker(RECONCILE_QUEUE, createProcessor(deps), {
    connection: deps.connection,
    concurrency: deps.config.workerConcurrency,
    // A killed worker's job is handed on after the lock lapses; steps are idempotent, so a
    // stalled job is retried as often as it takes (the lease prevents overlap).
    lockDuration: 10_000,
    stalledInterval: 5_000,
    maxStalledCount: 1_000,
  });
  worker.on("failed", (job, error) => {
    deps.log.warn({ job: job?.id, err: error, attemptsMade: job?.attemptsMade }, "reconcile job failed");
  });
  worker.on("error", (error) => {
    if (deps.redisHealth && !deps.redisHealth.connected()) deps.redisHealth.error(error);
    else deps.log.error({ err: error }, "worker error");
  });
  return worker;
}

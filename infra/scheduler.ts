// Periodic work as BullMQ job schedulers, not resident timers: the schedule lives in Redis, so it
// survives restarts of every operator process, and any worker runs the job. One thing a schedule
// in Redis cannot survive is Redis losing its data (a wipe, a restart without persistence): the
// scheduler role therefore keeps a marker key beside it and, when the marker is gone, puts the
// schedule back and enqueues every cluster, so the operator rebuilds its work from the cluster
// state alone.
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { OperatorConfig } from "../shared/config.ts";
import type { Logger } from "../shared/log.ts";
import { KEY_PREFIX, RESYNC_JOB, RESYNC_SCHEDULER } from "../shared/queue.ts";

export const SCHEDULE_MARKER = `${KEY_PREFIX}:schedules-installed`;

/** Re-enqueues every cluster each reconcile interval: the safety net behind event chaining. */
export async function scheduleResync(queue: Queue, config: OperatorConfig): Promise<void> {
  await queue.upsertJobScheduler(
    RESYNC_SCHEDULER,
    { every: config.reconcileIntervalMs },
    { name: RESYNC_JOB, data: {}, opts: { removeOnComplete: true, removeOnFail: { age: 3600 } } },
  );
}

export interface ScheduleGuard {
  stop(): void;
}

/**
 * Installs the schedules now, then checks every interval that Redis still has them; after a wipe
 * it reinstalls them and runs `resyncAll` at once (which enqueues every cluster).
 */
export async function guardSchedules(
  queue: Queue,
  redis: Redis,
  config: OperatorConfig,
  resyncAll: () => Promise<number>,
  log: Logger,
): Promise<ScheduleGuard> {
  const check = async () => {
    const present = (await redis.exists(SCHEDULE_MARKER)) === 1;
    await scheduleResync(queue, config);
    if (present) return;
    log.warn("no queue state in Redis (new, wiped or restarted empty); rebuilding it from the cluster state");
    const count = await resyncAll();
    await redis.set(SCHEDULE_MARKER, new Date().toISOString());
    log.info({ clusters: count }, "every cluster enqueued");
  };
  // A failed first check (apiserver or Redis not ready yet) is retried on the next tick.
  await check().catch((error: unknown) => log.warn({ err: error }, "first schedule check failed; retrying"));
  const timer = setInterval(() => {
    check().catch((error: unknown) => log.warn({ err: error }, "schedule check failed"));
  }, config.reconcileIntervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

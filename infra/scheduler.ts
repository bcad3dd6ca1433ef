// Periodic work as BullMQ job schedulers, not resident timers: the schedule lives in Redis, so it
// survives restarts of every operator process, and any worker runs the job.
import type { Queue } from "bullmq";
import type { OperatorConfig } from "../shared/config.ts";
import { RESYNC_JOB, RESYNC_SCHEDULER } from "../shared/queue.ts";

/** Re-enqueues every cluster each reconcile interval: the safety net behind event chaining. */
export async function scheduleResync(queue: Queue, config: OperatorConfig): Promise<void> {
  await queue.upsertJobScheduler(
    RESYNC_SCHEDULER,
    { every: config.reconcileIntervalMs },
    { name: RESYNC_JOB, data: {}, opts: { removeOnComplete: true, removeOnFail: { age: 3600 } } },
  );
}

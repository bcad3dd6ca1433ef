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

/**
 * How often the resync makes sure every cluster has its job (each job brings its cluster's looks).
 * A job is lost when Redis loses writes: a restart after its last fsync, or a failover before the
 * replicas had them. The schedule guard sees both (Redis's identity changes) and resyncs at once,
 * so the resync itself runs with the full looks. Where Redis does not say who it is (INFO refused),
 * the resync runs every look interval instead.
 */
export function resyncIntervalMs(
  config: Pick<OperatorConfig, "reconcileIntervalMs" | "fullLookIntervalMs">,
  identityKnown: boolean,
): number {
  return identityKnown
    ? Math.max(config.reconcileIntervalMs, config.fullLookIntervalMs)
    : config.reconcileIntervalMs;
}

/** Makes sure of every cluster's job every `every` ms: the safety net behind each cluster's own. */
export async function scheduleResync(queue: Queue, every: number): Promise<void> {
  await queue.upsertJobScheduler(
    RESYNC_SCHEDULER,
    { every },
    { name: RESYNC_JOB, data: {}, opts: { removeOnComplete: true, removeOnFail: { age: 3600 } } },
  );
}

const infoField = (info: string, name: string) => new RegExp(`^${name}:(\\S+)`, "m").exec(info)?.[1];

/**
 * Which Redis answers: its process (`run_id`, new at every start) and its history (`master_replid`,
 * new when a replica is promoted). Undefined when the server refuses INFO or does not say.
 */
export async function redisIdentity(redis: Redis): Promise<string | undefined> {
  try {
    const [server, replication] = await Promise.all([redis.info("server"), redis.info("replication")]);
    const runId = infoField(server, "run_id");
    const replId = infoField(replication, "master_replid");
    return runId && replId ? `${runId}/${replId}` : undefined;
  } catch {
    return undefined;
  }
}

export interface ScheduleGuard {
  stop(): void;
}

/**
 * Installs the schedules now, then checks every reconcile interval that Redis still has them and is
 * the same Redis. After a wipe it reinstalls them and runs `resyncAll` at once (which adds every
 * cluster's job); after a restart or a failover it runs `resyncAll` too, since writes may be lost.
 */
export async function guardSchedules(
  queue: Queue,
  redis: Redis,
  config: OperatorConfig,
  resyncAll: () => Promise<number>,
  log: Logger,
): Promise<ScheduleGuard> {
  // The schedule is written at start (settings may have changed) and again only when the marker
  // says Redis lost it or Redis changed; each check is one GET and two INFOs. The marker holds the
  // identity of the Redis that took the last resync: read on another one (a promoted replica, or the
  // same server restarted from its AOF) it says writes may be lost, to any scheduler, one that
  // started after the failover too.
  let installed = false;
  const check = async () => {
    const [marked, now] = await Promise.all([redis.get(SCHEDULE_MARKER), redisIdentity(redis)]);
    const present = marked !== null;
    const changed = present && now !== undefined && marked !== now;
    if (!present || !installed || changed) {
      await scheduleResync(queue, resyncIntervalMs(config, now !== undefined));
      installed = true;
    }
    if (!present) {
      log.warn(
        "no queue state in Redis (new, wiped or restarted empty); rebuilding it from the cluster state",
      );
    } else if (changed) {
      log.warn(
        { before: marked, now },
        "Redis restarted or failed over (writes may be lost); making sure every cluster has its job",
      );
    } else {
      return;
    }
    const count = await resyncAll();
    // Written once the resync is done: one that failed is tried again at the next check.
    await redis.set(SCHEDULE_MARKER, now ?? new Date().toISOString());
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

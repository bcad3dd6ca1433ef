// Queue names, job payload schemas, and how a reconcile is requested.
//
// One job per cluster: its jobId is the cluster key, so while a cluster's job waits, is delayed
// or runs, further requests for it add nothing (BullMQ ignores a duplicate jobId). A request that
// finds the job delayed promotes it, so an event is handled now rather than after the delay; a
// request that arrives while the job runs sets a "dirty" mark, which the worker checks when the
// step ends and then looks again at once. Mutual exclusion between workers does not rest on this
// alone: see shared/lease.ts.
import { type Static, Type } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";

export const RECONCILE_QUEUE = "etcd-reconcile";
export const RECONCILE_JOB = "reconcile";
export const RESYNC_JOB = "resync";
export const RESYNC_SCHEDULER = "resync-all-clusters";
export const KEY_PREFIX = "eop";
/** How long an idle BullMQ worker blocks on Redis before asking again (BullMQ's ceiling is 10 s). */
export const IDLE_POLL_SECONDS = 10;

const NAME = Type.String({ minLength: 1, maxLength: 253, pattern: "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$" });

export const ReconcilePayload = Type.Object(
  {
    namespace: NAME,
    name: NAME,
    /** Why it was requested (event type, "resync", "http"), for logs only. */
    reason: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
);
export type ReconcilePayload = Static<typeof ReconcilePayload>;

export const ResyncPayload = Type.Object({}, { additionalProperties: true });

export function isReconcilePayload(data: unknown): data is ReconcilePayload {
  return Value.Check(ReconcilePayload, data);
}

/** BullMQ job ids may not contain ':'; Kubernetes names cannot contain '/'. */
export function reconcileJobId(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

export function dirtyKey(namespace: string, name: string): string {
  return `${KEY_PREFIX}:dirty:${namespace}/${name}`;
}

export interface EnqueueOptions {
  reason?: string;
  /** Run no sooner than this (ms); default now. */
  delayMs?: number;
}

const PENDING = new Set(["waiting", "active", "delayed", "prioritized"]);

/**
 * Asks for a reconcile of one cluster; cheap and safe to call on every event. Marks it dirty, so
 * the look that follows is a full one (shared/look.ts).
 */
export async function requestReconcile(
  queue: Queue,
  redis: Redis,
  namespace: string,
  name: string,
  options: EnqueueOptions = {},
): Promise<void> {
  const jobId = reconcileJobId(namespace, name);
  // Marks the cluster dirty first: a worker running its step right now sees the mark when it ends.
  if (!options.delayMs) await redis.set(dirtyKey(namespace, name), "1", "EX", 300);
  const state = await queue.getJobState(jobId);
  if (state === "delayed" && !options.delayMs) {
    await (await queue.getJob(jobId))?.promote().catch(() => undefined);
    return;
  }
  if (PENDING.has(state)) return;
  await addReconcileJob(queue, namespace, name, state, options);
}

/**
 * Makes sure a cluster has its job, without hurrying one it has: the resync's safety net for a job
 * that was lost (Redis wiped or failed over). Each cluster's own job brings its periodic looks.
 * Returns whether a job was added.
 */
export async function ensureReconcile(
  queue: Queue,
  namespace: string,
  name: string,
  reason: string,
): Promise<boolean> {
  const state = await queue.getJobState(reconcileJobId(namespace, name));
  if (PENDING.has(state)) return false;
  await addReconcileJob(queue, namespace, name, state, { reason });
  return true;
}

async function addReconcileJob(
  queue: Queue,
  namespace: string,
  name: string,
  state: string,
  options: EnqueueOptions,
): Promise<void> {
  const jobId = reconcileJobId(namespace, name);
  if (state === "completed" || state === "failed") {
    // A finished job that was kept (e.g. failed for an invalid spec) would block the id: clear it.
    await (await queue.getJob(jobId))?.remove().catch(() => undefined);
  }
  const payload: ReconcilePayload = { namespace, name, reason: options.reason };
  await queue.add(RECONCILE_JOB, payload, {
    jobId,
    delay: options.delayMs,
    attempts: 8,
    backoff: { type: "exponential", delay: 500 },
    removeOnComplete: true,
    removeOnFail: { age: 3600 },
  });
}

// Backups and restores run from their own queue: a backup streams for minutes and must not take a
// reconcile slot, and a restore is a one-off. The jobs are named after what they do; the payload
// names the EtcdBackup or EtcdRestore.
export const BACKUP_QUEUE = "etcd-backup";
export const BACKUP_JOB = "backup";
export const RESTORE_JOB = "restore";

export const BackupPayload = Type.Object(
  {
    namespace: NAME,
    /** The EtcdBackup (for "backup") or EtcdRestore (for "restore"). */
    name: NAME,
    /** "schedule", "manual", "created", for logs and the status. */
    reason: Type.Optional(Type.String({ maxLength: 200 })),
  },
  { additionalProperties: false },
);
export type BackupPayload = Static<typeof BackupPayload>;

export function isBackupPayload(data: unknown): data is BackupPayload {
  return Value.Check(BackupPayload, data);
}

export function backupJobId(
  kind: typeof BACKUP_JOB | typeof RESTORE_JOB,
  namespace: string,
  name: string,
): string {
  return `${kind}/${namespace}/${name}`;
}

/**
 * Asks for one backup (or restore) now. One job per object at a time: a request while one waits or
 * runs adds nothing and says so, so a double click cannot start two uploads.
 */
export async function requestBackupJob(
  queue: Queue,
  kind: typeof BACKUP_JOB | typeof RESTORE_JOB,
  namespace: string,
  name: string,
  reason: string,
): Promise<{ jobId: string; queued: boolean }> {
  const jobId = backupJobId(kind, namespace, name);
  const state = await queue.getJobState(jobId);
  if (state === "waiting" || state === "active" || state === "delayed" || state === "prioritized") {
    return { jobId, queued: false };
  }
  if (state === "completed" || state === "failed")
    await (await queue.getJob(jobId))?.remove().catch(() => undefined);
  const payload: BackupPayload = { namespace, name, reason };
  await queue.add(kind, payload, {
    jobId,
    attempts: 5,
    backoff: { type: "exponential", delay: 2_000 },
    removeOnComplete: true,
    removeOnFail: { age: 24 * 3600 },
  });
  return { jobId, queued: true };
}

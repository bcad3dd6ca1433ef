// The worker host for backups and restores: takes `backup` and `restore` jobs from the backup
// queue and runs functions/backup.ts and functions/restore.ts.
// - One backup per EtcdBackup at a time (a Redis lease): a scheduled run that finds the previous
//   one still uploading is skipped, not stacked. The run checks the lease before each of its writes
//   (the upload's last bytes included), so a run taken over never mixes its object with another's.
// - A restore changes a cluster, so it holds the cluster's own lease (the reconcile's), and each
//   phase that must wait moves the job to delayed: no sleeping worker.
import { type Job, type Queue, UnrecoverableError, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { BackupSpecError, backupJob, isPeriodic, lastRunIsCurrent } from "../functions/backup.ts";
import { restoreStep } from "../functions/restore.ts";
import type { OperatorConfig } from "../shared/config.ts";
import type { Kube } from "../shared/kube.ts";
import { acquireLease, LeaseLostError } from "../shared/lease.ts";
import type { Logger } from "../shared/log.ts";
import { delayJob, type PromptDelays, promptDelays } from "../shared/prompt-delay.ts";
import {
  BACKUP_JOB,
  BACKUP_QUEUE,
  IDLE_POLL_SECONDS,
  isBackupPayload,
  RESTORE_JOB,
} from "../shared/queue.ts";
import { leaseReplicas } from "../shared/redis-connection.ts";
import type { RedisHealth } from "../shared/redis-health.ts";
import { inScope } from "../shared/scope.ts";
import { syncBackup, syncRestore } from "./backup-schedules.ts";
import { holdCollections } from "./memory-keeper.ts";

export interface BackupWorkerDeps {
  kube: Kube;
  redis: Redis;
  /** A dedicated connection for the BullMQ Worker (it blocks on it). */
  connection: Redis;
  config: OperatorConfig;
  log: Logger;
  /** The connection's health: worker errors while Redis is down are reported there, rate-limited. */
  redisHealth?: RedisHealth;
  /** The backup queue, to ask again for an object whose request came while its last job ran. */
  queue?: Queue;
}

export function createBackupProcessor(deps: BackupWorkerDeps, delays: PromptDelays = promptDelays()) {
  const etcd = { timeoutMs: deps.config.etcdTimeoutMs };
  const leaseOptions = { replicas: leaseReplicas(deps.config) };
  const processJob = async (job: Job, token?: string): Promise<unknown> => {
    if (!isBackupPayload(job.data))
      throw new UnrecoverableError(`invalid backup payload: ${JSON.stringify(job.data)}`);
    const { namespace, name, reason } = job.data;
    const key = `${namespace}/${name}`;
    if (job.name === BACKUP_JOB) {
      const log = deps.log.child({ backup: key, job: job.id, attempt: job.attemptsMade + 1, reason });
      const acquired = await acquireLease(
        deps.redis,
        `backup/${key}`,
        deps.config.leaseTtlMs,
        {},
        {
          ...leaseOptions,
          reclaim: true,
        },
      );
      if ("heldForMs" in acquired) {
        // A scheduled run is skipped, not stacked; a one-shot backup waits for the run in flight
        // (it finds the backup done, or takes over if that run's process died).
        if (reason === "schedule") {
          log.info("the previous backup is still running; skipping this run");
          return { skipped: "running" };
        }
        log.info(
          { heldForMs: acquired.heldForMs },
          "another run of this backup is in flight; waiting for it",
        );
        return delayJob(delays, job, token, Math.min(acquired.heldForMs, 5_000));
      }
      try {
        const backup = await deps.kube.getBackup(namespace, name);
        if (backup && !inScope(backup, deps.config)) return { skipped: "out of scope" };
        const result = await backupJob(
          { namespace, name, reason },
          {
            kube: deps.kube,
            log,
            etcd,
            operatorImage: deps.config.operatorImage,
            guard: () => acquired.lease.guard(),
          },
        );
        return result.kind === "done" ? { path: result.record.path, size: result.record.size } : result;
      } catch (error) {
        if (error instanceof BackupSpecError) throw new UnrecoverableError(error.message);
        if (error instanceof LeaseLostError) {
          log.warn("another run took this backup over; this run stopped before its last write");
          return { skipped: "taken over" };
        }
        throw error;
      } finally {
        await acquired.lease.release();
      }
    }
    if (job.name === RESTORE_JOB) {
      const restore = await deps.kube.getRestore(namespace, name);
      if (!restore || !inScope(restore, deps.config)) return { skipped: "gone or out of scope" };
      const cluster = `${namespace}/${restore.spec.etcdCluster.name}`;
      // restoreStep adds the phase it runs (and logs "restore phase starting").
      const log = deps.log.child({ restore: key, cluster, job: job.id });
      // Verifying reads the backup only (minutes for a big one, in place): the cluster's reconcile
      // goes on meanwhile. From Staging on, the restore marks the cluster and creates its pods.
      const phase = restore.status?.phase;
      const changesCluster = phase === "Staging" || phase === "Replacing" || phase === "Seeding";
      const acquired = changesCluster
        ? await acquireLease(deps.redis, cluster, deps.config.leaseTtlMs, {}, leaseOptions)
        : { lease: { guard: async () => {}, release: async () => {} } };
      if ("heldForMs" in acquired) return delayJob(delays, job, token, Math.min(acquired.heldForMs, 1_000));
      let requeueAfterMs: number | undefined;
      try {
        const result = await restoreStep(restore, {
          kube: deps.kube,
          log,
          etcd,
          operatorImage: deps.config.operatorImage,
          guard: () => acquired.lease.guard(),
        });
        if (result.done) return { phase: result.status.phase, reason: result.status.reason };
        requeueAfterMs = result.requeueAfterMs;
      } catch (error) {
        if (error instanceof LeaseLostError) requeueAfterMs = 1_000;
        else throw error;
      } finally {
        await acquired.lease.release();
      }
      return delayJob(delays, job, token, requeueAfterMs);
    }
    throw new UnrecoverableError(`unknown job "${job.name}" on ${BACKUP_QUEUE}`);
  };
  // Backups stream a snapshot, restores may read a whole backup: no forced collections meanwhile.
  return async (job: Job, token?: string): Promise<unknown> => {
    const release = holdCollections();
    try {
      return await processJob(job, token);
    } finally {
      release();
    }
  };
}

/**
 * One job per object at a time: a request for an EtcdRestore or one-shot EtcdBackup that came
 * while the last job of that name still ran (the object deleted and made again) was dropped. Once
 * a job ends, its object is looked at again and asked for if it still wants a run; the resync would
 * otherwise find it only on its next round, minutes later.
 */
function followUp(deps: BackupWorkerDeps, job: Job): void {
  const { queue } = deps;
  if (!queue || !isBackupPayload(job.data)) return;
  const { namespace, name } = job.data;
  const again = async () => {
    if (job.name === RESTORE_JOB) {
      const restore = await deps.kube.getRestore(namespace, name);
      if (restore && inScope(restore, deps.config)) await syncRestore(queue, restore);
    } else if (job.name === BACKUP_JOB) {
      const backup = await deps.kube.getBackup(namespace, name);
      // Only an object made again or changed while the job ran: the run just recorded its outcome
      // for the current spec otherwise, and a failure for good would be asked for again forever.
      if (backup && inScope(backup, deps.config) && !isPeriodic(backup) && !lastRunIsCurrent(backup))
        await syncBackup(queue, backup);
    }
  };
  again().catch((error: unknown) =>
    deps.log.warn({ err: error, job: job.id }, "could not look again at the job's object"),
  );
}

export function startBackupWorker(deps: BackupWorkerDeps): Worker {
  const delays = promptDelays();
  const worker = new Worker(BACKUP_QUEUE, createBackupProcessor(deps, delays), {
    connection: deps.connection,
    concurrency: deps.config.backupConcurrency,
    lockDuration: 30_000,
    stalledInterval: 15_000,
    maxStalledCount: 10,
    drainDelay: IDLE_POLL_SECONDS,
  });
  worker.on("closing", () => delays.close());
  worker.on("failed", (job, error) => {
    deps.log.warn({ job: job?.id, err: error, attemptsMade: job?.attemptsMade }, "backup job failed");
    if (job) followUp(deps, job);
  });
  worker.on("completed", (job) => followUp(deps, job));
  worker.on("error", (error) => {
    if (deps.redisHealth && !deps.redisHealth.connected()) deps.redisHealth.error(error);
    else deps.log.error({ err: error }, "backup worker error");
  });
  return worker;
}

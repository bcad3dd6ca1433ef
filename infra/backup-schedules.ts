// Which backup and restore jobs should exist, kept in step with the EtcdBackup and EtcdRestore
// objects. A periodic EtcdBackup owns one BullMQ job scheduler (`backup/<ns>/<name>`, every
// backupIntervalInSecond): no timer lives in any process, and the schedule survives operator
// restarts. The watcher calls `syncBackup`/`syncRestore` on every change; the resync job calls
// `resyncBackups`, which also rebuilds what a Redis wipe lost and drops schedulers of deleted
// backups.
import type { Queue } from "bullmq";
import { alreadyDone, isPeriodic } from "../functions/backup.ts";
import type { EtcdBackup } from "../shared/api/etcd-backup.ts";
import type { EtcdRestore } from "../shared/api/etcd-restore.ts";
import type { Kube } from "../shared/kube.ts";
import { BACKUP_JOB, type BackupPayload, RESTORE_JOB, requestBackupJob } from "../shared/queue.ts";
import { inScope, type ScopeConfig } from "../shared/scope.ts";

const SCHEDULER_PREFIX = "backup/";

export function backupSchedulerId(namespace: string, name: string): string {
  return `${SCHEDULER_PREFIX}${namespace}/${name}`;
}

export async function syncBackup(queue: Queue, backup: EtcdBackup): Promise<"scheduled" | "queued" | "none"> {
  const namespace = backup.metadata?.namespace ?? "default";
  const name = backup.metadata?.name ?? "";
  const id = backupSchedulerId(namespace, name);
  if (isPeriodic(backup)) {
    const every = (backup.spec.backupPolicy?.backupIntervalInSecond ?? 0) * 1000;
    const existing = await queue.getJobScheduler(id);
    // Re-upserting an unchanged scheduler would move its next run: only create or change it.
    if (existing?.every !== every) {
      const data: BackupPayload = { namespace, name, reason: "schedule" };
      await queue.upsertJobScheduler(
        id,
        { every },
        {
          name: BACKUP_JOB,
          data,
          opts: {
            attempts: 3,
            backoff: { type: "exponential", delay: 2_000 },
            removeOnComplete: true,
            removeOnFail: { age: 24 * 3600 },
          },
        },
      );
    }
    return "scheduled";
  }
  await queue.removeJobScheduler(id);
  if (alreadyDone(backup)) return "none";
  await requestBackupJob(queue, BACKUP_JOB, namespace, name, "created");
  return "queued";
}

export async function forgetBackup(queue: Queue, namespace: string, name: string): Promise<void> {
  await queue.removeJobScheduler(backupSchedulerId(namespace, name));
}

export async function syncRestore(queue: Queue, restore: EtcdRestore): Promise<boolean> {
  const phase = restore.status?.phase;
  if (phase === "Completed" || phase === "Failed") return false;
  const { queued } = await requestBackupJob(
    queue,
    RESTORE_JOB,
    restore.metadata?.namespace ?? "default",
    restore.metadata?.name ?? "",
    "created",
  );
  return queued;
}

/** Brings every backup scheduler and pending restore job in line with the objects. */
export async function resyncBackups(kube: Kube, queue: Queue, scope: ScopeConfig): Promise<void> {
  const namespace = scope.clusterWide ? undefined : scope.namespace;
  const backups = (await kube.listBackups(namespace)).filter((b) => inScope(b, scope));
  const wanted = new Set<string>();
  for (const backup of backups) {
    if (isPeriodic(backup)) {
      wanted.add(backupSchedulerId(backup.metadata?.namespace ?? "default", backup.metadata?.name ?? ""));
      await syncBackup(queue, backup);
    }
  }
  for (const scheduler of await queue.getJobSchedulers()) {
    const id = scheduler.key;
    if (id.startsWith(SCHEDULER_PREFIX) && !wanted.has(id)) await queue.removeJobScheduler(id);
  }
  for (const restore of await kube.listRestores(namespace)) {
    if (inScope(restore, scope)) await syncRestore(queue, restore);
  }
}

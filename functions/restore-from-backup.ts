// Step: every member of a formed cluster is lost (no pod, no data): the last resort is the newest
// successful backup. An EtcdBackup counts as this cluster's when its endpoints name the cluster's
// client Service (`http://<cluster>-client:2379`, as coreos's examples do); its status says where
// its last good backup is. The step creates an EtcdRestore (named like the cluster, owned by it)
// from that object, and the restore function (functions/restore.ts) does the rest. Writes after
// that backup are lost, and the Event says so with the backup's time and revision.
// Without such a backup the cluster is Failed, with a message saying what the user can do.
import type { EtcdBackup } from "../shared/api/etcd-backup.ts";
import { GROUP, SCOPE_ANNOTATION, VERSION } from "../shared/api/etcd-cluster.ts";
import { type EtcdRestore, RESTORE_KIND } from "../shared/api/etcd-restore.ts";
import { ownerReference } from "../shared/kube.ts";
import { clientServiceName } from "../shared/member-pods.ts";
import { bucketPath, isStorageType, STORAGES, sectionOf } from "../shared/object-store/storages.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

/** On EtcdRestores this operator created itself; a failed one is not retried automatically. */
export const AUTO_RESTORE_ANNOTATION = `${GROUP}/created-for`;
export const AUTO_RESTORE_REASON = "all-members-lost";

const NO_BACKUP_MESSAGE =
  "every member pod is gone and no member holds data, and no successful EtcdBackup of this cluster exists; " +
  "restore from a backup (EtcdRestore) or delete and re-create the cluster";

/** Whether one of the backup's endpoints is the cluster's client Service (any DNS form). */
export function backsUpCluster(backup: EtcdBackup, clusterName: string, namespace: string): boolean {
  const service = clientServiceName(clusterName);
  return (backup.spec.etcdEndpoints ?? []).some((url) => {
    try {
      const parts = new URL(url).hostname.split(".");
      return parts[0] === service && (parts.length === 1 || parts[1] === namespace);
    } catch {
      return false;
    }
  });
}

/** The newest successful backup of the cluster among the EtcdBackups, if any. */
export function latestBackup(
  backups: EtcdBackup[],
  clusterName: string,
  namespace: string,
): EtcdBackup | undefined {
  return backups
    .filter(
      (b) => backsUpCluster(b, clusterName, namespace) && b.status?.backupPath && b.status.lastSuccessDate,
    )
    .filter((b) => isStorageType(b.spec.storageType))
    .sort(
      (a, b) => Date.parse(b.status?.lastSuccessDate ?? "") - Date.parse(a.status?.lastSuccessDate ?? ""),
    )[0];
}

function scopeOf(cluster: StepInput["cluster"]): Record<string, string> {
  const scope = cluster.metadata?.annotations?.[SCOPE_ANNOTATION];
  return scope ? { [SCOPE_ANNOTATION]: scope } : {};
}

/** The EtcdRestore that brings the cluster back from that backup's last object. */
export function restoreFor(input: StepInput, backup: EtcdBackup): EtcdRestore {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const name = input.cluster.metadata?.name ?? "";
  const path = bucketPath(backup.status?.backupPath ?? "");
  const type = backup.spec.storageType;
  const section = sectionOf(type, backup.spec);
  const storage = section ? { [STORAGES[type].section]: { ...section, path } } : {};
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: RESTORE_KIND,
    metadata: {
      name,
      namespace,
      // With the cluster's scope: a cluster-wide operator takes only restores annotated for it.
      annotations: { [AUTO_RESTORE_ANNOTATION]: AUTO_RESTORE_REASON, ...scopeOf(input.cluster) },
      ownerReferences: [{ ...ownerReference(input.cluster), controller: false }],
    },
    spec: { etcdCluster: { name }, backupStorageType: backup.spec.storageType, ...storage },
  };
}

export async function restoreFromLatestBackup(input: StepInput, deps: StepDeps): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const name = input.cluster.metadata?.name ?? "";
  const existing = await deps.kube.getRestore(namespace, name);
  const ours = existing?.metadata?.annotations?.[AUTO_RESTORE_ANNOTATION] === AUTO_RESTORE_REASON;
  const phase = existing?.status?.phase;
  if (existing && phase !== "Completed" && phase !== "Failed") {
    return { requeueAfterMs: 5_000 }; // A restore is under way; it marks the cluster when it starts replacing.
  }
  if (existing && ours && phase === "Failed") {
    return {
      event: {
        type: "Warning",
        reason: "AllMembersLost",
        message: `every member is lost and the automatic restore failed (${existing.status?.reason}); fix the backup or delete the EtcdRestore ${name} to try again`,
      },
    };
  }
  const backup = latestBackup(await deps.kube.listBackups(namespace), name, namespace);
  if (!backup) return { event: { type: "Warning", reason: "AllMembersLost", message: NO_BACKUP_MESSAGE } };
  const event = {
    type: "Warning" as const,
    reason: "RestoringFromBackup",
    message:
      `every member is lost; restoring from the latest backup ${backup.status?.backupPath} (taken ${backup.status?.lastSuccessDate}, ` +
      `revision ${backup.status?.etcdRevision ?? "unknown"}): writes after it are lost`,
  };
  await deps.guard();
  // The report of what is lost goes out before the EtcdRestore exists: a worker killed between the
  // two would otherwise leave it unsent for good (the next look finds the restore under way).
  await deps.kube.event(input.cluster, event.type, event.reason, event.message, {
    key: `restore-from-backup.${backup.status?.backupPath}.${backup.status?.lastSuccessDate}`,
  });
  // A finished restore of the same name (from an earlier loss, or a person's) would block the new one.
  if (existing) await deps.kube.deleteRestore(namespace, name);
  await deps.kube.createRestore(restoreFor(input, backup));
  return { requeueAfterMs: 5_000, event, announced: true };
}

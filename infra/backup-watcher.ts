// Watches EtcdBackups and EtcdRestores and keeps their jobs in step (infra/backup-schedules.ts):
// a created or edited EtcdBackup gets its schedule (periodic) or its one backup (one-shot), a
// deleted one loses its schedule, and a new EtcdRestore gets its job. Only spec changes count:
// the worker's own status writes come back as updates too.
import {
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
} from "@kubernetes/client-node";
import type { Queue } from "bullmq";
import { BACKUP_PLURAL, type EtcdBackup } from "../shared/api/etcd-backup.ts";
import { GROUP, VERSION } from "../shared/api/etcd-cluster.ts";
import { type EtcdRestore, RESTORE_PLURAL } from "../shared/api/etcd-restore.ts";
import type { OperatorConfig } from "../shared/config.ts";
import { resilientInformer } from "../shared/informer.ts";
import type { Logger } from "../shared/log.ts";
import { inScope } from "../shared/scope.ts";
import { forgetBackup, syncBackup, syncRestore } from "./backup-schedules.ts";

export interface BackupWatcher {
  ready: Promise<void>;
  stop(): Promise<void>;
}

export function startBackupWatcher(deps: {
  kc: KubeConfig;
  backupQueue: Queue;
  config: OperatorConfig;
  log: Logger;
}): BackupWatcher {
  const { kc, config, backupQueue } = deps;
  const log = deps.log.child({ component: "backup-watcher" });
  const custom = kc.makeApiClient(CustomObjectsApi);
  const namespace = config.clusterWide ? undefined : config.namespace;
  const path = (plural: string) =>
    namespace
      ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${plural}`
      : `/apis/${GROUP}/${VERSION}/${plural}`;
  const list = async <T extends KubernetesObject>(plural: string) =>
    (namespace
      ? await custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural })
      : await custom.listClusterCustomObject({
          group: GROUP,
          version: VERSION,
          plural,
        })) as KubernetesListObject<T>;

  const backups = resilientInformer<EtcdBackup>(
    kc,
    path(BACKUP_PLURAL),
    () => list<EtcdBackup>(BACKUP_PLURAL),
    log,
  );
  const restores = resilientInformer<EtcdRestore>(
    kc,
    path(RESTORE_PLURAL),
    () => list<EtcdRestore>(RESTORE_PLURAL),
    log,
  );

  const seenGeneration = new Map<string, number | undefined>();
  const onBackup = (backup: EtcdBackup) => {
    if (!inScope(backup, config)) return;
    const uid = backup.metadata?.uid ?? "";
    if (seenGeneration.has(uid) && seenGeneration.get(uid) === backup.metadata?.generation) return;
    seenGeneration.set(uid, backup.metadata?.generation);
    const key = `${backup.metadata?.namespace}/${backup.metadata?.name}`;
    syncBackup(backupQueue, backup).then(
      (what) => log.info({ backup: key, what }, "backup synced"),
      (error: unknown) => log.error({ err: error, backup: key }, "could not schedule the backup"),
    );
  };
  backups.on("add", onBackup);
  backups.on("update", onBackup);
  backups.on("delete", (backup: EtcdBackup) => {
    seenGeneration.delete(backup.metadata?.uid ?? "");
    forgetBackup(backupQueue, backup.metadata?.namespace ?? "", backup.metadata?.name ?? "").catch(
      (error: unknown) => log.error({ err: error }, "could not remove the backup schedule"),
    );
  });
  const onRestore = (restore: EtcdRestore) => {
    if (!inScope(restore, config)) return;
    syncRestore(backupQueue, restore).catch((error: unknown) =>
      log.error({ err: error, restore: restore.metadata?.name }, "could not enqueue the restore"),
    );
  };
  restores.on("add", onRestore);

  const ready = Promise.all([backups.start(), restores.start()]).then(() => undefined);
  return {
    ready,
    async stop() {
      await Promise.all([backups.stop(), restores.stop()]);
    },
  };
}

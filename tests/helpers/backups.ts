// What end-to-end tests and benchmarks do with EtcdBackups and EtcdRestores: create them, wait for
// their outcome, read their Events, and fill a cluster with data to back up.
import { randomBytes } from "node:crypto";
import { CustomObjectsApi, type KubeConfig } from "@kubernetes/client-node";
import type { Etcd3 } from "etcd3";
import { installCrds } from "../../infra/crds.ts";
import {
  type LocalCluster,
  type LocalClusterOptions,
  startLocalCluster,
} from "../../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../../infra/local/kube-wait.ts";
import type { ObjectStore } from "../../infra/local/object-store.ts";
import { BACKUP_PLURAL, type EtcdBackup } from "../../shared/api/etcd-backup.ts";
import { GROUP, VERSION } from "../../shared/api/etcd-cluster.ts";
import { type EtcdRestore, RESTORE_PLURAL } from "../../shared/api/etcd-restore.ts";
import { Kube } from "../../shared/kube.ts";
import type { ClusterClients } from "./clusters.ts";

export interface ClusterWithStore {
  local: LocalCluster;
  store: ObjectStore;
  kc: KubeConfig;
  clients: ClusterClients;
}

/**
 * What every backup test starts from: a local cluster with its S3 store, clients, our CRDs and an
 * empty bucket. `teardown` is handed the stop as soon as the cluster runs, so a failure in the rest
 * of the set-up still stops it.
 */
export async function startClusterWithStore(
  options: Omit<LocalClusterOptions, "objectStore"> & { name: string; bucket: string },
  teardown?: (stop: () => Promise<void>) => void,
): Promise<ClusterWithStore> {
  const { bucket, ...clusterOptions } = options;
  const local = await startLocalCluster({ ...clusterOptions, objectStore: true });
  teardown?.(() => local.stop());
  const store = local.s3;
  if (!store) throw new Error("the local cluster started without its object store");
  const { kc, core } = clientsFor(local.kubeconfigPath);
  const clients: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
  await installCrds(kc);
  await store.createBucket(bucket);
  return { local, store, kc, clients };
}

export async function createBackup(
  c: ClusterClients,
  namespace: string,
  name: string,
  spec: object,
): Promise<void> {
  await c.custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: BACKUP_PLURAL,
    body: { apiVersion: `${GROUP}/${VERSION}`, kind: "EtcdBackup", metadata: { name }, spec },
  });
}

export async function getBackup(c: ClusterClients, namespace: string, name: string): Promise<EtcdBackup> {
  const found = await c.kube.getBackup(namespace, name);
  if (!found) throw new Error(`EtcdBackup ${name} not found`);
  return found;
}

export async function deleteCustom(
  c: ClusterClients,
  namespace: string,
  plural: string,
  name: string,
): Promise<void> {
  await c.custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, name });
}

/** Waits for the backup's first outcome (success or failure) written at or after `since` (ms). */
export async function waitBackupOutcome(
  c: ClusterClients,
  namespace: string,
  name: string,
  options: { since?: number; timeoutMs?: number; intervalMs?: number } = {},
): Promise<NonNullable<EtcdBackup["status"]>> {
  return waitFor(
    `EtcdBackup ${name} to finish`,
    async () => {
      const status = (await getBackup(c, namespace, name)).status;
      const at = status?.lastAttemptDate ? Date.parse(status.lastAttemptDate) : 0;
      return status && status.succeeded !== undefined && at >= (options.since ?? 0) ? status : undefined;
    },
    {
      timeoutMs: options.timeoutMs ?? 90_000,
      intervalMs: options.intervalMs ?? 200,
      describe: async () => JSON.stringify((await getBackup(c, namespace, name)).status),
    },
  );
}

/** An EtcdRestore of `clusterName` (it must have the cluster's name). */
export async function createRestore(
  c: ClusterClients,
  namespace: string,
  clusterName: string,
  spec: object,
): Promise<void> {
  await c.custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: RESTORE_PLURAL,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "EtcdRestore",
      metadata: { name: clusterName },
      spec: { etcdCluster: { name: clusterName }, ...spec },
    },
  });
}

export async function waitRestore(
  c: ClusterClients,
  namespace: string,
  name: string,
  phase: "Completed" | "Failed",
  timeoutMs = 120_000,
): Promise<EtcdRestore> {
  return waitFor(
    `EtcdRestore ${name} to be ${phase}`,
    async () => {
      const restore = await c.kube.getRestore(namespace, name);
      if (restore?.status?.phase === "Failed" && phase !== "Failed") {
        throw new Error(`restore failed: ${restore.status.reason}`);
      }
      return restore?.status?.phase === phase ? restore : undefined;
    },
    {
      timeoutMs,
      intervalMs: 300,
      describe: async () => JSON.stringify((await c.kube.getRestore(namespace, name))?.status),
    },
  );
}

export async function eventsOf(
  c: ClusterClients,
  namespace: string,
  kind: string,
  name: string,
): Promise<EventSummary[]> {
  const list = await c.core.listNamespacedEvent({
    namespace,
    fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}`,
  });
  return list.items.map((e) => ({ type: e.type, reason: e.reason, message: e.message }));
}

type EventSummary = { type?: string; reason?: string; message?: string };

/**
 * Whether an Event of the object matching `matches` shows up within `timeoutMs`. The operator
 * writes a status before the Event that goes with it: a test that read the Events at once, on
 * seeing the status, could miss one.
 */
export async function eventSeen(
  c: ClusterClients,
  namespace: string,
  kind: string,
  name: string,
  matches: (event: EventSummary) => boolean,
  timeoutMs = 15_000,
): Promise<boolean> {
  return waitFor(
    `a matching ${kind} ${name} Event`,
    async () => ((await eventsOf(c, namespace, kind, name)).some(matches) ? true : undefined),
    { timeoutMs, intervalMs: 200 },
  ).catch(() => false);
}

/**
 * Writes `bytes` of random values (1 MiB each, under etcd's 1.5 MiB request limit) under `fill/`,
 * a few puts in flight; reports progress every 128 MiB.
 */
export async function fillKeyspace(
  client: Etcd3,
  bytes: number,
  progress: (writtenBytes: number) => void = () => {},
): Promise<number> {
  const valueSize = 1024 * 1024;
  const count = Math.ceil(bytes / valueSize);
  let next = 0;
  let written = 0;
  const worker = async () => {
    while (next < count) {
      const index = next++;
      await client.put(`fill/${String(index).padStart(6, "0")}`).value(randomBytes(valueSize));
      written += valueSize;
      if (written % (128 * valueSize) === 0) progress(written);
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  return count;
}

/**
 * The data of the Secret an EtcdBackup's `awsSecret` names (the AWS CLI's files, as coreos
 * documented) for a store's key; `secret` overrides the secret key (to test a wrong one).
 */
export function awsSecretData(
  store: { accessKeyId: string; secretAccessKey: string; region: string },
  secret = store.secretAccessKey,
): Record<string, string> {
  return {
    credentials: `[default]\naws_access_key_id = ${store.accessKeyId}\naws_secret_access_key = ${secret}\n`,
    config: `[default]\nregion = ${store.region}\n`,
  };
}

/** Creates a Secret with the given string data. */
export async function createSecret(
  c: ClusterClients,
  namespace: string,
  name: string,
  stringData: Record<string, string>,
): Promise<void> {
  await c.core.createNamespacedSecret({ namespace, body: { metadata: { name }, stringData } });
}

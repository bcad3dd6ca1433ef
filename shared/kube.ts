// The operator's Kubernetes calls in one place: EtcdCluster reads and status writes, the pods
// and Services it owns, and Events. Functions get a `Kube` as a dependency, never build clients.
import { randomBytes } from "node:crypto";
import {
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  PolicyV1Api,
  setHeaderOptions,
  type V1ObjectMeta,
  type V1OwnerReference,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1PodDisruptionBudget,
  type V1Service,
} from "@kubernetes/client-node";
import { generate as generateMergePatch } from "json-merge-patch";
import { BACKUP_PLURAL, type EtcdBackup, type EtcdBackupStatus } from "./api/etcd-backup.ts";
import {
  type EtcdCluster,
  type EtcdClusterStatus,
  GROUP,
  KIND,
  PLURAL,
  VERSION,
} from "./api/etcd-cluster.ts";
import { type EtcdRestore, type EtcdRestoreStatus, RESTORE_PLURAL } from "./api/etcd-restore.ts";
import { httpStatusOf, ignoreConflict, ignoreGoneOrConflict, orUndefinedOn404 } from "./kube-errors.ts";
import { KubeJsonReader } from "./kube-json.ts";

/** A JSON merge patch of a status object: fields given are set, fields given as null removed. */
export type StatusPatch<T> = { [K in keyof T]?: T[K] | null };

export const MERGE_PATCH = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
export const JSON_PATCH = setHeaderOptions("Content-Type", PatchStrategy.JsonPatch);
export const COMPONENT = "etcd-operator";
export { httpStatusOf };

/** Creates an object or, when it exists (409), patches the fields the operator keeps set on it. */
async function createOrPatch(create: () => Promise<unknown>, patch: () => Promise<unknown>): Promise<void> {
  try {
    await create();
  } catch (error) {
    if (httpStatusOf(error) !== 409) throw error;
    await patch();
  }
}

/** Labels on every pod the operator creates (the coreos operator's labels, so selectors still match). */
export function memberLabels(clusterName: string): Record<string, string> {
  return { app: "etcd", etcd_cluster: clusterName };
}

export function memberSelector(clusterName: string): string {
  return `app=etcd,etcd_cluster=${clusterName}`;
}

/** The controller reference to one of our objects (an EtcdCluster unless it says another kind). */
export function ownerReference(owner: EventSubject): V1OwnerReference {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: owner.kind ?? KIND,
    name: owner.metadata?.name ?? "",
    uid: owner.metadata?.uid ?? "",
    controller: true,
    blockOwnerDeletion: true,
  };
}

/** An object Events can be about: ours, in our API group. */
export interface EventSubject {
  kind?: string;
  metadata?: V1ObjectMeta;
}

export interface KubeOptions {
  /**
   * Told the resourceVersion of an EtcdCluster after each write the operator makes to it, and after
   * a read that found it newer than the floor the read was given (shared/read-floor.ts).
   */
  onClusterVersion?: (namespace: string, name: string, resourceVersion: string) => Promise<void>;
}

function resourceVersionOf(object: unknown): string | undefined {
  if (typeof object !== "object" || object === null || !("metadata" in object)) return undefined;
  const metadata = object.metadata;
  if (typeof metadata !== "object" || metadata === null || !("resourceVersion" in metadata)) return undefined;
  return typeof metadata.resourceVersion === "string" ? metadata.resourceVersion : undefined;
}

function customPath(plural: string, namespace: string, name: string): string {
  return `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/${plural}/${encodeURIComponent(name)}`;
}

export class Kube {
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  readonly policy: PolicyV1Api;
  /** Our own objects are read through this lean path when the kubeconfig allows (shared/kube-json.ts). */
  private readonly json: KubeJsonReader | undefined;

  private readonly options: KubeOptions;

  constructor(kc: KubeConfig, options: KubeOptions = {}) {
    this.options = options;
    this.core = kc.makeApiClient(CoreV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.policy = kc.makeApiClient(PolicyV1Api);
    this.json = KubeJsonReader.for(kc);
  }

  private async clusterVersionSeen(object: unknown, namespace: string, name: string): Promise<void> {
    const resourceVersion = resourceVersionOf(object);
    if (resourceVersion && this.options.onClusterVersion)
      await this.options.onClusterVersion(namespace, name, resourceVersion);
  }

  /** A Service as read on every reconcile: the lean path when there is one. */
  private async readServiceLean(namespace: string, name: string): Promise<V1Service | undefined> {
    if (!this.json) return this.getService(namespace, name);
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/services/${encodeURIComponent(name)}`;
    return (await this.json.get(path)) as V1Service | undefined;
  }

  /** Whether the Service exists. */
  async serviceExists(namespace: string, name: string): Promise<boolean> {
    return (await this.readServiceLean(namespace, name)) !== undefined;
  }

  /**
   * Whether the headless peer Service exists and publishes members that are not Ready: a member
   * must resolve its peers' names, and they its, before it is Ready. coreos's Services relied on
   * an annotation Kubernetes no longer reads, so one taken over from it is fixed (applyPeerService).
   */
  async peerServiceUsable(namespace: string, name: string): Promise<boolean> {
    return (await this.readServiceLean(namespace, name))?.spec?.publishNotReadyAddresses === true;
  }

  /** Creates the peer Service, or makes an existing one publish not-ready members. */
  async applyPeerService(service: V1Service): Promise<void> {
    const namespace = service.metadata?.namespace ?? "default";
    const name = service.metadata?.name ?? "";
    await createOrPatch(
      () => this.core.createNamespacedService({ namespace, body: service }),
      () =>
        this.core.patchNamespacedService(
          {
            namespace,
            name,
            body: { spec: { publishNotReadyAddresses: service.spec?.publishNotReadyAddresses } },
          },
          MERGE_PATCH,
        ),
    );
  }

  /** The budget's spec.minAvailable, undefined without a budget (read on every reconcile, like serviceExists). */
  async budgetMinAvailable(namespace: string, name: string): Promise<number | string | undefined> {
    if (!this.json) return (await this.getPodDisruptionBudget(namespace, name))?.spec?.minAvailable;
    const budget = (await this.json.get(
      `/apis/policy/v1/namespaces/${encodeURIComponent(namespace)}/poddisruptionbudgets/${encodeURIComponent(name)}`,
    )) as { spec?: { minAvailable?: number | string } } | undefined;
    return budget?.spec?.minAvailable;
  }

  async getPodDisruptionBudget(namespace: string, name: string): Promise<V1PodDisruptionBudget | undefined> {
    return orUndefinedOn404(this.policy.readNamespacedPodDisruptionBudget({ namespace, name }));
  }

  /** Creates the budget, or sets its minAvailable when it exists. */
  async applyPodDisruptionBudget(budget: V1PodDisruptionBudget): Promise<void> {
    const namespace = budget.metadata?.namespace ?? "default";
    const name = budget.metadata?.name ?? "";
    await createOrPatch(
      () => this.policy.createNamespacedPodDisruptionBudget({ namespace, body: budget }),
      () =>
        this.policy.patchNamespacedPodDisruptionBudget(
          { namespace, name, body: { spec: { minAvailable: budget.spec?.minAvailable } } },
          MERGE_PATCH,
        ),
    );
  }

  /** A quorum read: the cluster as etcd has it now. */
  async getCluster(namespace: string, name: string): Promise<EtcdCluster | undefined> {
    return (await this.getCustom(PLURAL, namespace, name)) as EtcdCluster | undefined;
  }

  /**
   * The cluster at `floor` or newer, from the API server's watch cache; a quorum read without a
   * floor, or when the cached read fails (e.g. 504 after the cache did not catch up in time).
   * Reports a version newer than the floor (shared/read-floor.ts).
   */
  async getClusterNotOlderThan(
    namespace: string,
    name: string,
    floor: string | undefined,
  ): Promise<EtcdCluster | undefined> {
    let cluster: EtcdCluster | undefined;
    if (floor && this.json) {
      cluster = (await this.json
        .get(`${customPath(PLURAL, namespace, name)}?resourceVersion=${encodeURIComponent(floor)}`)
        .catch(() => this.getCluster(namespace, name))) as EtcdCluster | undefined;
    } else {
      cluster = await this.getCluster(namespace, name);
    }
    if (cluster && resourceVersionOf(cluster) !== floor)
      await this.clusterVersionSeen(cluster, namespace, name);
    return cluster;
  }

  /** Every EtcdCluster in one namespace, or in all namespaces when namespace is undefined. */
  async listClusters(namespace: string | undefined): Promise<EtcdCluster[]> {
    return (await this.listCustom(namespace, PLURAL)) as EtcdCluster[];
  }

  /**
   * Sends the change from the status read to `status` as a merge patch: a key the new status no
   * longer has (a removed member's memberVersions entry, a field coreos wrote) goes as null, since
   * a merge patch leaves out-of-patch keys as they are and they would stay for ever.
   */
  async patchClusterStatus(cluster: EtcdCluster, status: EtcdClusterStatus): Promise<void> {
    // Through JSON first: a field left undefined is one to remove, not one to keep.
    const next: EtcdClusterStatus = JSON.parse(JSON.stringify(status));
    const patch = generateMergePatch(cluster.status ?? {}, next);
    if (patch === undefined) return;
    const written = await this.patchCustomStatus(PLURAL, cluster, patch);
    await this.clusterVersionSeen(
      written,
      cluster.metadata?.namespace ?? "default",
      cluster.metadata?.name ?? "",
    );
  }

  async listMemberPods(namespace: string, clusterName: string): Promise<V1Pod[]> {
    const list = await this.core.listNamespacedPod({ namespace, labelSelector: memberSelector(clusterName) });
    return list.items;
  }

  async createPod(pod: V1Pod): Promise<void> {
    await ignoreConflict(
      this.core.createNamespacedPod({ namespace: pod.metadata?.namespace ?? "default", body: pod }),
    );
  }

  async createClaim(claim: V1PersistentVolumeClaim): Promise<void> {
    await ignoreConflict(
      this.core.createNamespacedPersistentVolumeClaim({
        namespace: claim.metadata?.namespace ?? "default",
        body: claim,
      }),
    );
  }

  /** The PersistentVolumeClaims holding the data of a cluster's members (see memberClaim). */
  async listMemberClaims(namespace: string, clusterName: string): Promise<V1PersistentVolumeClaim[]> {
    const list = await this.core.listNamespacedPersistentVolumeClaim({
      namespace,
      labelSelector: memberSelector(clusterName),
    });
    return list.items;
  }

  async deleteClaim(namespace: string, name: string): Promise<void> {
    try {
      await this.core.deleteNamespacedPersistentVolumeClaim({ namespace, name });
    } catch (error) {
      if (httpStatusOf(error) !== 404) throw error;
    }
  }

  async deletePod(
    namespace: string,
    name: string,
    options: { gracePeriodSeconds?: number } = {},
  ): Promise<void> {
    try {
      await this.core.deleteNamespacedPod({
        namespace,
        name,
        gracePeriodSeconds: options.gracePeriodSeconds,
      });
    } catch (error) {
      if (httpStatusOf(error) !== 404) throw error;
    }
  }

  /** Changes one container's image (and pod annotations) in place: the kubelet restarts it. */
  async patchPodImage(
    namespace: string,
    name: string,
    container: string,
    image: string,
    annotations: Record<string, string>,
  ): Promise<void> {
    const pod = await this.core.readNamespacedPod({ namespace, name });
    const index = pod.spec?.containers.findIndex((c) => c.name === container) ?? -1;
    if (index < 0) throw new Error(`pod ${namespace}/${name} has no container "${container}"`);
    const pointer = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1");
    const operations: object[] = [
      // The test guards against a concurrent change: the patch applies only to the pod we read.
      { op: "test", path: "/metadata/uid", value: pod.metadata?.uid },
      { op: "replace", path: `/spec/containers/${index}/image`, value: image },
    ];
    if (!pod.metadata?.annotations) operations.push({ op: "add", path: "/metadata/annotations", value: {} });
    for (const [key, value] of Object.entries(annotations)) {
      operations.push({ op: "add", path: `/metadata/annotations/${pointer(key)}`, value });
    }
    await this.core.patchNamespacedPod({ namespace, name, body: operations }, JSON_PATCH);
  }

  async getBackup(namespace: string, name: string): Promise<EtcdBackup | undefined> {
    return (await this.getCustom(BACKUP_PLURAL, namespace, name)) as EtcdBackup | undefined;
  }

  /** Every EtcdBackup in one namespace, or in all namespaces when namespace is undefined. */
  async listBackups(namespace: string | undefined): Promise<EtcdBackup[]> {
    return (await this.listCustom(namespace, BACKUP_PLURAL)) as EtcdBackup[];
  }

  async listRestores(namespace: string | undefined): Promise<EtcdRestore[]> {
    return (await this.listCustom(namespace, RESTORE_PLURAL)) as EtcdRestore[];
  }

  private async listCustom(namespace: string | undefined, plural: string): Promise<unknown[]> {
    const list = (
      namespace
        ? await this.custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural })
        : await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural })
    ) as { items?: unknown[] };
    return list.items ?? [];
  }
  private async getCustom(plural: string, namespace: string, name: string): Promise<unknown> {
    if (this.json) return this.json.get(customPath(plural, namespace, name));
    return orUndefinedOn404(
      this.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, name }),
    );
  }

  /**
   * A status merge patch on one of our objects. The UID precondition keeps a late write from landing
   * on a re-created object of the same name; a deleted object or a conflict is no error.
   * Returns the object as written (undefined when it was gone or had changed).
   */
  private async patchCustomStatus(plural: string, object: EventSubject, status: object): Promise<unknown> {
    return ignoreGoneOrConflict(
      this.custom.patchNamespacedCustomObjectStatus(
        {
          group: GROUP,
          version: VERSION,
          namespace: object.metadata?.namespace ?? "default",
          plural,
          name: object.metadata?.name ?? "",
          body: { metadata: { uid: object.metadata?.uid }, status },
        },
        MERGE_PATCH,
      ),
    );
  }

  async patchBackupStatus(backup: EtcdBackup, status: EtcdBackupStatus): Promise<void> {
    await this.patchCustomStatus(BACKUP_PLURAL, backup, status);
  }

  async getRestore(namespace: string, name: string): Promise<EtcdRestore | undefined> {
    return (await this.getCustom(RESTORE_PLURAL, namespace, name)) as EtcdRestore | undefined;
  }

  async createRestore(restore: EtcdRestore): Promise<void> {
    await this.custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: restore.metadata?.namespace ?? "default",
      plural: RESTORE_PLURAL,
      body: restore,
    });
  }

  async deleteRestore(namespace: string, name: string): Promise<void> {
    try {
      await this.custom.deleteNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: RESTORE_PLURAL,
        name,
      });
    } catch (error) {
      if (httpStatusOf(error) !== 404) throw error;
    }
  }

  /** A JSON merge patch of the status: a field set to null is removed. */
  async patchRestoreStatus(restore: EtcdRestore, status: StatusPatch<EtcdRestoreStatus>): Promise<void> {
    await this.patchCustomStatus(RESTORE_PLURAL, restore, status);
  }

  /** Sets (string) or removes (null) annotations of an EtcdCluster, only while it is the cluster we read. */
  async annotateCluster(cluster: EtcdCluster, annotations: Record<string, string | null>): Promise<void> {
    const written: unknown = await this.custom.patchNamespacedCustomObject(
      {
        group: GROUP,
        version: VERSION,
        namespace: cluster.metadata?.namespace ?? "default",
        plural: PLURAL,
        name: cluster.metadata?.name ?? "",
        body: { metadata: { uid: cluster.metadata?.uid, annotations } },
      },
      MERGE_PATCH,
    );
    await this.clusterVersionSeen(
      written,
      cluster.metadata?.namespace ?? "default",
      cluster.metadata?.name ?? "",
    );
  }

  /** A Secret's data, decoded; undefined when the Secret does not exist. */
  async readSecret(namespace: string, name: string): Promise<Record<string, string> | undefined> {
    const secret = await orUndefinedOn404(this.core.readNamespacedSecret({ namespace, name }));
    if (!secret) return undefined;
    const data: Record<string, string> = { ...(secret.stringData ?? {}) };
    for (const [key, value] of Object.entries(secret.data ?? {}))
      data[key] = Buffer.from(value, "base64").toString("utf8");
    return data;
  }

  async listPods(namespace: string, labelSelector: string): Promise<V1Pod[]> {
    return (await this.core.listNamespacedPod({ namespace, labelSelector })).items;
  }

  async getPod(namespace: string, name: string): Promise<V1Pod | undefined> {
    return orUndefinedOn404(this.core.readNamespacedPod({ namespace, name }));
  }

  async getService(namespace: string, name: string): Promise<V1Service | undefined> {
    return orUndefinedOn404(this.core.readNamespacedService({ namespace, name }));
  }

  async createService(service: V1Service): Promise<void> {
    await ignoreConflict(
      this.core.createNamespacedService({
        namespace: service.metadata?.namespace ?? "default",
        body: service,
      }),
    );
  }

  /**
   * Records a Kubernetes Event on one of our objects (EtcdCluster, EtcdBackup, EtcdRestore); failures
   * to record are not the step's failure.
   *
   * With a `key`, the Event's name is derived from it, so recording the same fact twice (a step
   * retried after its worker died between acting and reporting) counts up one Event instead of
   * adding a second: steps whose effect must be announced exactly once record before they act.
   */
  async event(
    object: EventSubject,
    type: "Normal" | "Warning",
    reason: string,
    message: string,
    options: { key?: string } = {},
  ): Promise<void> {
    const namespace = object.metadata?.namespace ?? "default";
    const suffix = options.key ? eventNameSuffix(options.key) : randomBytes(8).toString("hex");
    const name = `${object.metadata?.name}.${suffix}`;
    const now = new Date();
    try {
      await this.core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name, namespace },
          involvedObject: {
            apiVersion: `${GROUP}/${VERSION}`,
            kind: object.kind ?? KIND,
            name: object.metadata?.name,
            namespace,
            uid: object.metadata?.uid,
          },
          reason,
          message,
          type,
          count: 1,
          firstTimestamp: now,
          lastTimestamp: now,
          source: { component: COMPONENT },
          reportingComponent: COMPONENT,
          reportingInstance: COMPONENT,
        },
      });
    } catch (err) {
      if (options.key && httpStatusOf(err) === 409) await this.countEventAgain(namespace, name, now);
      // Otherwise: Events are best effort; losing one must not fail or repeat a step.
    }
  }

  private async countEventAgain(namespace: string, name: string, now: Date): Promise<void> {
    try {
      const existing = await this.core.readNamespacedEvent({ namespace, name });
      await this.core.patchNamespacedEvent(
        { namespace, name, body: { count: (existing.count ?? 1) + 1, lastTimestamp: now } },
        MERGE_PATCH,
      );
    } catch {
      // Best effort, as above.
    }
  }
}

/** A keyed Event's name suffix: lower case, only the characters an object name may hold. */
function eventNameSuffix(key: string): string {
  return key
    .toLowerCase()
    .replace(/[^a-z0-9.-]+/g, "-")
    .replace(/^[.-]+|[.-]+$/g, "")
    .slice(0, 200);
}

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
  type V1OwnerReference,
  type V1Pod,
  type V1PodDisruptionBudget,
  type V1Service,
} from "@kubernetes/client-node";
import {
  type EtcdCluster,
  type EtcdClusterStatus,
  GROUP,
  KIND,
  PLURAL,
  VERSION,
} from "./api/etcd-cluster.ts";
import { httpStatusOf, ignoreConflict, ignoreGoneOrConflict, orUndefinedOn404 } from "./kube-errors.ts";

export const MERGE_PATCH = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
export const JSON_PATCH = setHeaderOptions("Content-Type", PatchStrategy.JsonPatch);
export const COMPONENT = "etcd-operator";
export { httpStatusOf };

/** Labels on every pod the operator creates (the coreos operator's labels, so selectors still match). */
export function memberLabels(clusterName: string): Record<string, string> {
  return { app: "etcd", etcd_cluster: clusterName };
}

export function memberSelector(clusterName: string): string {
  return `app=etcd,etcd_cluster=${clusterName}`;
}

export function ownerReference(cluster: EtcdCluster): V1OwnerReference {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: KIND,
    name: cluster.metadata?.name ?? "",
    uid: cluster.metadata?.uid ?? "",
    controller: true,
    blockOwnerDeletion: true,
  };
}

export class Kube {
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  readonly policy: PolicyV1Api;

  constructor(kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.policy = kc.makeApiClient(PolicyV1Api);
  }

  async getPodDisruptionBudget(namespace: string, name: string): Promise<V1PodDisruptionBudget | undefined> {
    return orUndefinedOn404(this.policy.readNamespacedPodDisruptionBudget({ namespace, name }));
  }

  /** Creates the budget, or sets its minAvailable when it exists. */
  async applyPodDisruptionBudget(budget: V1PodDisruptionBudget): Promise<void> {
    const namespace = budget.metadata?.namespace ?? "default";
    const name = budget.metadata?.name ?? "";
    try {
      await this.policy.createNamespacedPodDisruptionBudget({ namespace, body: budget });
    } catch (error) {
      if (httpStatusOf(error) !== 409) throw error;
      await this.policy.patchNamespacedPodDisruptionBudget(
        { namespace, name, body: { spec: { minAvailable: budget.spec?.minAvailable } } },
        MERGE_PATCH,
      );
    }
  }

  async getCluster(namespace: string, name: string): Promise<EtcdCluster | undefined> {
    const found = await orUndefinedOn404(
      this.custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        name,
      }),
    );
    return found as EtcdCluster | undefined;
  }

  /** Every EtcdCluster in one namespace, or in all namespaces when namespace is undefined. */
  async listClusters(namespace: string | undefined): Promise<EtcdCluster[]> {
    const list = (
      namespace
        ? await this.custom.listNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            namespace,
            plural: PLURAL,
          })
        : await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL })
    ) as { items?: EtcdCluster[] };
    return list.items ?? [];
  }

  async patchClusterStatus(cluster: EtcdCluster, status: EtcdClusterStatus): Promise<void> {
    await ignoreGoneOrConflict(
      this.custom.patchNamespacedCustomObjectStatus(
        {
          group: GROUP,
          version: VERSION,
          namespace: cluster.metadata?.namespace ?? "default",
          plural: PLURAL,
          name: cluster.metadata?.name ?? "",
          // The UID precondition keeps a late step from writing onto a re-created cluster of the same name.
          body: { metadata: { uid: cluster.metadata?.uid }, status },
        },
        MERGE_PATCH,
      ),
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

  async deletePod(namespace: string, name: string): Promise<void> {
    try {
      await this.core.deleteNamespacedPod({ namespace, name });
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

  /** Records a Kubernetes Event on the EtcdCluster; failures to record are not the step's failure. */
  async event(
    cluster: EtcdCluster,
    type: "Normal" | "Warning",
    reason: string,
    message: string,
  ): Promise<void> {
    const namespace = cluster.metadata?.namespace ?? "default";
    const now = new Date();
    try {
      await this.core.createNamespacedEvent({
        namespace,
        body: {
          metadata: { name: `${cluster.metadata?.name}.${randomBytes(8).toString("hex")}`, namespace },
          involvedObject: {
            apiVersion: `${GROUP}/${VERSION}`,
            kind: KIND,
            name: cluster.metadata?.name,
            namespace,
            uid: cluster.metadata?.uid,
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
    } catch {
      // Events are best effort: losing one must not fail or repeat a step.
    }
  }
}

// The watcher: forwards EtcdCluster events and those of what a cluster owns (member pods, its
// Services and its disruption budget) into the queue as "reconcile this cluster". It keeps no state of its own beyond informer caches; on start the informers' initial
// lists enqueue every existing cluster, which is also how the operator rebuilds its work after
// Redis was wiped. Informers restart with backoff after watch errors and apiserver restarts.
import {
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  PolicyV1Api,
  type V1Pod,
  type V1PodDisruptionBudget,
  type V1Service,
} from "@kubernetes/client-node";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import type { OperatorConfig } from "../shared/config.ts";
import { type ResilientInformer, resilientInformer } from "../shared/informer.ts";
import type { Logger } from "../shared/log.ts";
import { requestReconcile } from "../shared/queue.ts";
import { raiseFloor } from "../shared/read-floor.ts";
import { inScope } from "../shared/scope.ts";

export interface WatcherDeps {
  kc: KubeConfig;
  queue: Queue;
  redis: Redis;
  config: OperatorConfig;
  log: Logger;
}

export interface Watcher {
  stop(): Promise<void>;
  /** Resolves once the first lists are in (every existing cluster has been enqueued). */
  ready: Promise<void>;
}

/** What the planner reads from a pod: phase, readiness, IP, deletion, restarts. */
export function podSummary(pod: V1Pod): string {
  const ready = pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
  const restarts = (pod.status?.containerStatuses ?? []).reduce((n, c) => n + (c.restartCount ?? 0), 0);
  return [
    pod.status?.phase,
    ready,
    pod.status?.podIP,
    pod.metadata?.deletionTimestamp ? "deleting" : "",
    restarts,
  ].join("|");
}

/** Every object the operator makes for a cluster carries this label (memberLabels in shared/kube.ts). */
const OWNED_SELECTOR = "app=etcd";

export function startWatcher(deps: WatcherDeps): Watcher {
  const { kc, config } = deps;
  const log = deps.log.child({ component: "watcher" });
  const custom = kc.makeApiClient(CustomObjectsApi);
  const core = kc.makeApiClient(CoreV1Api);
  const namespace = config.clusterWide ? undefined : config.namespace;
  const clusterPath = namespace
    ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}`
    : `/apis/${GROUP}/${VERSION}/${PLURAL}`;
  const podPath = namespace ? `/api/v1/namespaces/${namespace}/pods` : "/api/v1/pods";
  const servicePath = namespace ? `/api/v1/namespaces/${namespace}/services` : "/api/v1/services";
  const policy = kc.makeApiClient(PolicyV1Api);
  const budgetPath = namespace
    ? `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`
    : "/apis/policy/v1/poddisruptionbudgets";

  const clusters: ResilientInformer<EtcdCluster> = resilientInformer(
    kc,
    clusterPath,
    async () =>
      (namespace
        ? await custom.listNamespacedCustomObject({
            group: GROUP,
            version: VERSION,
            namespace,
            plural: PLURAL,
          })
        : await custom.listClusterCustomObject({
            group: GROUP,
            version: VERSION,
            plural: PLURAL,
          })) as KubernetesListObject<EtcdCluster>,
    log,
  );
  const pods: ResilientInformer<V1Pod> = resilientInformer(
    kc,
    podPath,
    () =>
      namespace
        ? core.listNamespacedPod({ namespace, labelSelector: "app=etcd" })
        : core.listPodForAllNamespaces({ labelSelector: "app=etcd" }),
    log,
    "app=etcd",
  );

  // A cluster's Services and budget: a change or deletion is repaired at the next look, which the
  // event brings at once (the periodic look no longer reads them every time).
  const services: ResilientInformer<V1Service> = resilientInformer(
    kc,
    servicePath,
    () =>
      namespace
        ? core.listNamespacedService({ namespace, labelSelector: OWNED_SELECTOR })
        : core.listServiceForAllNamespaces({ labelSelector: OWNED_SELECTOR }),
    log,
    OWNED_SELECTOR,
  );
  const budgets: ResilientInformer<V1PodDisruptionBudget> = resilientInformer(
    kc,
    budgetPath,
    () =>
      namespace
        ? policy.listNamespacedPodDisruptionBudget({ namespace, labelSelector: OWNED_SELECTOR })
        : policy.listPodDisruptionBudgetForAllNamespaces({ labelSelector: OWNED_SELECTOR }),
    log,
    OWNED_SELECTOR,
  );

  // The cluster's read floor is raised first (when the change came with the cluster's version), so
  // the reconcile it asks for reads at least this version (shared/read-floor.ts).
  const enqueue = (ns: string, name: string, reason: string, resourceVersion?: string) => {
    raiseFloor(deps.redis, `${ns}/${name}`, resourceVersion)
      .then(() => requestReconcile(deps.queue, deps.redis, ns, name, { reason }))
      .catch((error: unknown) =>
        log.error({ err: error, cluster: `${ns}/${name}` }, "could not enqueue reconcile"),
      );
  };
  // Our own status writes also arrive as updates; only spec (generation), annotations or a
  // deletion are news to the planner.
  const lastGeneration = new Map<string, string>();
  const onCluster = (reason: string) => (cluster: EtcdCluster) => {
    if (!inScope(cluster, config)) return;
    const uid = cluster.metadata?.uid ?? "";
    const marker = [
      cluster.metadata?.generation,
      JSON.stringify(cluster.metadata?.annotations ?? {}),
      cluster.metadata?.deletionTimestamp ? "deleting" : "",
    ].join("|");
    if (lastGeneration.get(uid) === marker) return;
    lastGeneration.set(uid, marker);
    enqueue(
      cluster.metadata?.namespace ?? "",
      cluster.metadata?.name ?? "",
      reason,
      cluster.metadata?.resourceVersion,
    );
  };
  clusters.on("add", onCluster("added"));
  clusters.on("update", onCluster("updated"));
  // The kubelet rewrites pod status often (probe times, conditions); only changes the planner
  // looks at are worth a reconcile, or waits would be cut short by every status write.
  const lastSeen = new Map<string, string>();
  const onPod = (reason: string) => (pod: V1Pod) => {
    const owner = pod.metadata?.ownerReferences?.find((o) => o.kind === "EtcdCluster" && o.controller);
    const ns = pod.metadata?.namespace ?? "";
    if (!owner) return;
    const uid = pod.metadata?.uid ?? "";
    const summary = podSummary(pod);
    if (reason === "pod deleted") lastSeen.delete(uid);
    else if (lastSeen.get(uid) === summary) return;
    else lastSeen.set(uid, summary);
    const cluster = clusters.get(owner.name, ns);
    if (cluster && !inScope(cluster, config)) return;
    enqueue(ns, owner.name, reason);
  };
  pods.on("add", onPod("pod added"));
  pods.on("update", onPod("pod changed"));
  pods.on("delete", onPod("pod deleted"));
  // Their specs only: the status of a budget changes with every member's readiness.
  const lastSpec = new Map<string, string>();
  const onOwned =
    (reason: string) =>
    (object: KubernetesObject & { spec?: unknown }): void => {
      const owner = object.metadata?.ownerReferences?.find((o) => o.kind === "EtcdCluster" && o.controller);
      if (!owner) return;
      const uid = object.metadata?.uid ?? "";
      const spec = JSON.stringify(object.spec ?? {});
      if (reason.endsWith("deleted")) lastSpec.delete(uid);
      else if (lastSpec.get(uid) === spec) return;
      else {
        const known = lastSpec.has(uid);
        lastSpec.set(uid, spec);
        // Listing them at start is no news: the first look at each cluster reads them anyway.
        if (!known && reason.endsWith("added")) return;
      }
      const ns = object.metadata?.namespace ?? "";
      const cluster = clusters.get(owner.name, ns);
      if (cluster && !inScope(cluster, config)) return;
      enqueue(ns, owner.name, reason);
    };
  services.on("add", onOwned("service added"));
  services.on("update", onOwned("service changed"));
  services.on("delete", onOwned("service deleted"));
  budgets.on("add", onOwned("budget added"));
  budgets.on("update", onOwned("budget changed"));
  budgets.on("delete", onOwned("budget deleted"));

  const ready = Promise.all([clusters.start(), pods.start(), services.start(), budgets.start()]).then(() => {
    log.info({ namespace: namespace ?? "(all)", clusters: clusters.list().length }, "watching");
  });
  return {
    ready,
    async stop() {
      await Promise.all([clusters.stop(), pods.stop(), services.stop(), budgets.stop()]);
    },
  };
}

// What end-to-end tests do with EtcdClusters and their members, in one place: create, read, patch,
// wait until a size is ready, and reach the members from the host.
import type { CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import { waitFor } from "../../infra/local/kube-wait.ts";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../../shared/api/etcd-cluster.ts";
import { type Kube, MERGE_PATCH } from "../../shared/kube.ts";

export interface ClusterClients {
  kube: Kube;
  core: CoreV1Api;
  custom: CustomObjectsApi;
}

export async function createCluster(
  c: ClusterClients,
  namespace: string,
  name: string,
  spec: object,
  annotations?: Record<string, string>,
): Promise<void> {
  await c.custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PLURAL,
    body: { apiVersion: `${GROUP}/${VERSION}`, kind: "EtcdCluster", metadata: { name, annotations }, spec },
  });
}

/** Deletes the EtcdCluster and waits until it and its member pods are gone. */
export async function deleteCluster(
  c: ClusterClients,
  namespace: string,
  name: string,
  timeoutMs = 60_000,
): Promise<void> {
  await c.custom.deleteNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PLURAL,
    name,
  });
  await waitFor(
    `${name} and its pods to be gone`,
    async () => {
      const pods = await c.core.listNamespacedPod({ namespace, labelSelector: `etcd_cluster=${name}` });
      return pods.items.length === 0 && !(await c.kube.getCluster(namespace, name)) ? true : undefined;
    },
    { timeoutMs, intervalMs: 300 },
  );
}

export async function getCluster(c: ClusterClients, namespace: string, name: string): Promise<EtcdCluster> {
  const found = await c.kube.getCluster(namespace, name);
  if (!found) throw new Error(`EtcdCluster ${namespace}/${name} not found`);
  return found;
}

/** A merge patch, not a read-modify-replace: the operator writes status concurrently. */
export async function patchSpec(
  c: ClusterClients,
  namespace: string,
  name: string,
  spec: object,
): Promise<void> {
  await c.custom.patchNamespacedCustomObject(
    { group: GROUP, version: VERSION, namespace, plural: PLURAL, name, body: { spec } },
    MERGE_PATCH,
  );
}

export async function readyPods(c: ClusterClients, namespace: string, name: string): Promise<number> {
  const pods = await c.core.listNamespacedPod({ namespace, labelSelector: `etcd_cluster=${name}` });
  return pods.items.filter(
    (p) =>
      !p.metadata?.deletionTimestamp &&
      p.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
  ).length;
}

/** Client URLs of the cluster's live member pods, by IP (the host has no cluster DNS). */
export async function memberEndpoints(c: ClusterClients, namespace: string, name: string): Promise<string[]> {
  const pods = await c.core.listNamespacedPod({ namespace, labelSelector: `etcd_cluster=${name}` });
  return (
    pods.items
      // A pod that ended keeps its IP in its status, but nothing answers there any more.
      .filter(
        (p) =>
          p.status?.podIP &&
          !p.metadata?.deletionTimestamp &&
          p.status.phase !== "Failed" &&
          p.status.phase !== "Succeeded",
      )
      .map((p) => `http://${p.status?.podIP}:2379`)
  );
}

/** Waits until the cluster is steady with `size` ready members. */
export async function waitReady(
  c: ClusterClients,
  namespace: string,
  name: string,
  size: number,
  timeoutMs = 90_000,
): Promise<void> {
  await waitFor(
    `${namespace}/${name} to have ${size} ready members`,
    async () => {
      const cluster = await getCluster(c, namespace, name);
      const steady = cluster.status?.conditions?.find((x) => x.type === "Progressing")?.status === "False";
      return steady && cluster.status?.readyMembers === size && (await readyPods(c, namespace, name)) === size
        ? true
        : undefined;
    },
    {
      timeoutMs,
      intervalMs: 300,
      describe: async () => JSON.stringify((await getCluster(c, namespace, name)).status),
    },
  );
}

/** An etcd client for the cluster's members (close it). */
/** A client certificate for a cluster that serves clients over TLS, and the name its members' certificates carry. */
export interface ClientTls {
  ca: string;
  cert: string;
  key: string;
  serverName: string;
}

export async function etcdClient(
  c: ClusterClients,
  namespace: string,
  name: string,
  tls?: ClientTls,
): Promise<Etcd3> {
  const hosts = await memberEndpoints(c, namespace, name);
  if (!tls) return new Etcd3({ hosts, grpcOptions: { "grpc.use_local_subchannel_pool": 1 } });
  return new Etcd3({
    hosts: hosts.map((h) => h.replace(/^http:/, "https:")),
    credentials: {
      rootCertificate: Buffer.from(tls.ca),
      certChain: Buffer.from(tls.cert),
      privateKey: Buffer.from(tls.key),
    },
    grpcOptions: {
      "grpc.use_local_subchannel_pool": 1,
      "grpc.ssl_target_name_override": tls.serverName,
      "grpc.default_authority": tls.serverName,
    },
  });
}

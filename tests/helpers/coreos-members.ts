// An etcd cluster as the archived coreos etcd-operator left it, for takeover tests: its member
// pods, Services and EtcdCluster status built the way its source builds them (pkg/util/k8sutil
// newEtcdPod, etcdContainer, newEtcdProbe, newEtcdServiceManifest; EtcdCluster.AsOwner;
// pkg/apis/etcd/v1beta2 ClusterStatus), not with this operator's builders.
import { randomUUID } from "node:crypto";
import type {
  CoreV1Api,
  CustomObjectsApi,
  V1OwnerReference,
  V1Pod,
  V1Service,
} from "@kubernetes/client-node";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../../shared/api/etcd-cluster.ts";
import { MERGE_PATCH } from "../../shared/kube.ts";
import { newMemberName } from "../../shared/member-pods.ts";

/** coreos's AsOwner: a controller reference without blockOwnerDeletion. */
function coreosOwner(cluster: EtcdCluster): V1OwnerReference {
  return {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "EtcdCluster",
    name: cluster.metadata?.name ?? "",
    uid: cluster.metadata?.uid ?? "",
    controller: true,
  };
}

/** `<member>.<cluster>.<namespace>.svc`: coreos's Member.Addr(). */
function addr(member: string, cluster: string, namespace: string): string {
  return `${member}.${cluster}.${namespace}.svc`;
}

/** coreos's newEtcdProbe: `etcdctl endpoint status` every 60 s, after 10 s. */
function coreosProbe() {
  return {
    exec: { command: ["/bin/sh", "-ec", "ETCDCTL_API=3 etcdctl endpoint status"] },
    initialDelaySeconds: 10,
    timeoutSeconds: 10,
    periodSeconds: 60,
    failureThreshold: 3,
  };
}

export function coreosMemberPod(
  cluster: EtcdCluster,
  member: string,
  initialCluster: string[],
  version: string,
  token: string,
): V1Pod {
  const name = cluster.metadata?.name ?? "";
  const namespace = cluster.metadata?.namespace ?? "default";
  const host = addr(member, name, namespace);
  // coreos joins one string with spaces and splits it again into the command.
  const command = [
    "/usr/local/bin/etcd",
    "--data-dir=/var/etcd/data",
    `--name=${member}`,
    `--initial-advertise-peer-urls=http://${host}:2380`,
    "--listen-peer-urls=http://0.0.0.0:2380",
    "--listen-client-urls=http://0.0.0.0:2379",
    `--advertise-client-urls=http://${host}:2379`,
    `--initial-cluster=${initialCluster.join(",")}`,
    "--initial-cluster-state=new",
    "--strict-reconfig-check=true",
    "--listen-metrics-urls=http://0.0.0.0:2381",
    `--initial-cluster-token=${token}`,
  ];
  const readiness = { ...coreosProbe(), initialDelaySeconds: 1, timeoutSeconds: 5, periodSeconds: 5 };
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: member,
      namespace,
      labels: { app: "etcd", etcd_node: member, etcd_cluster: name },
      annotations: { "etcd.version": version },
      ownerReferences: [coreosOwner(cluster)],
    },
    spec: {
      initContainers: [
        {
          image: "busybox:1.28.0-glibc",
          name: "check-dns",
          command: [
            "/bin/sh",
            "-c",
            `
          TIMEOUT_READY=0
          while ( ! nslookup ${host} )
          do
            # If TIMEOUT_READY is 0 we should never time out and exit
            TIMEOUT_READY=$(( TIMEOUT_READY-1 ))
            if [ $TIMEOUT_READY -eq 0 ];
            then
              echo "Timed out waiting for DNS entry"
              exit 1
            fi
            sleep 1
          done`,
          ],
        },
      ],
      containers: [
        {
          command,
          name: "etcd",
          image: `quay.io/coreos/etcd:v${version}`,
          ports: [
            { name: "server", containerPort: 2380, protocol: "TCP" },
            { name: "client", containerPort: 2379, protocol: "TCP" },
          ],
          volumeMounts: [{ name: "etcd-data", mountPath: "/var/etcd" }],
          livenessProbe: coreosProbe(),
          readinessProbe: readiness,
        },
      ],
      restartPolicy: "Never",
      volumes: [{ name: "etcd-data", emptyDir: {} }],
      hostname: member,
      subdomain: name,
      automountServiceAccountToken: false,
    },
  };
}

/** coreos's newEtcdServiceManifest: both Services carry the tolerate-unready annotation. */
function coreosService(cluster: EtcdCluster, serviceName: string, headless: boolean): V1Service {
  const name = cluster.metadata?.name ?? "";
  const labels = { etcd_cluster: name, app: "etcd" };
  const client = { name: "client", port: 2379, targetPort: 2379, protocol: "TCP" };
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: {
      name: serviceName,
      namespace: cluster.metadata?.namespace,
      labels,
      annotations: { "service.alpha.kubernetes.io/tolerate-unready-endpoints": "true" },
      ownerReferences: [coreosOwner(cluster)],
    },
    spec: {
      ports: headless ? [client, { name: "peer", port: 2380, targetPort: 2380, protocol: "TCP" }] : [client],
      selector: labels,
      // What the annotation did on the Kubernetes coreos ran on: without it, no member resolves
      // another before it is Ready, and a new cluster never forms. Kubernetes 1.24 stopped
      // reading the annotation (unreadyPublishingDropped shows the Service as it then acts).
      ...(headless ? { clusterIP: "None", publishNotReadyAddresses: true } : {}),
    },
  };
}

/** The peer Service as it acts since Kubernetes stopped reading coreos's annotation. */
export async function unreadyPublishingDropped(core: CoreV1Api, cluster: EtcdCluster): Promise<void> {
  await core.patchNamespacedService(
    {
      namespace: cluster.metadata?.namespace ?? "default",
      name: cluster.metadata?.name ?? "",
      body: { spec: { publishNotReadyAddresses: false } },
    },
    MERGE_PATCH,
  );
}

export interface CoreosCluster {
  members: string[];
}

/**
 * Creates what coreos made for a new cluster of `size` members at `version`: the peer and client
 * Services and every seed member's pod (coreos added them one by one; the outcome is the same
 * static bootstrap), then the status it wrote once they ran.
 */
export async function createCoreosMembers(
  core: CoreV1Api,
  cluster: EtcdCluster,
  size: number,
  version: string,
): Promise<CoreosCluster> {
  const name = cluster.metadata?.name ?? "";
  const namespace = cluster.metadata?.namespace ?? "default";
  await core.createNamespacedService({ namespace, body: coreosService(cluster, name, true) });
  await core.createNamespacedService({ namespace, body: coreosService(cluster, `${name}-client`, false) });
  const members = Array.from({ length: size }, () => newMemberName(name));
  const initial = members.map((m) => `${m}=http://${addr(m, name, namespace)}:2380`);
  const token = randomUUID();
  for (const member of members) {
    await core.createNamespacedPod({
      namespace,
      body: coreosMemberPod(cluster, member, initial, version, token),
    });
  }
  return { members };
}

/** The status coreos wrote for a running cluster (a Scaling condition left from its last scale-up). */
export async function writeCoreosStatus(
  custom: CustomObjectsApi,
  cluster: EtcdCluster,
  members: string[],
  version: string,
): Promise<void> {
  const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  const condition = (type: string, reason: string, message: string) => ({
    type,
    status: "True",
    lastUpdateTime: now,
    lastTransitionTime: now,
    reason,
    message,
  });
  await custom.patchNamespacedCustomObjectStatus(
    {
      group: GROUP,
      version: VERSION,
      namespace: cluster.metadata?.namespace ?? "default",
      plural: PLURAL,
      name: cluster.metadata?.name ?? "",
      body: {
        status: {
          phase: "Running",
          reason: "",
          controlPaused: false,
          conditions: [
            condition("Available", "Cluster available", ""),
            condition(
              "Scaling",
              "Scaling up",
              `Current cluster size: ${members.length - 1}, desired cluster size: ${members.length}`,
            ),
          ],
          size: members.length,
          serviceName: `${cluster.metadata?.name}-client`,
          clientPort: 2379,
          members: { ready: [...members].sort() },
          currentVersion: version,
          targetVersion: "",
        },
      },
    },
    MERGE_PATCH,
  );
}

// What an etcd member looks like in Kubernetes: its pod (named `<cluster>-<random>`, reached by
// DNS as `<pod>.<cluster>.<ns>.svc`, never by IP, so its peer URL is known before it exists), the
// headless peer Service that gives it that name (publishNotReadyAddresses, so a starting member
// is resolvable before it is Ready), and the client Service.
import { randomBytes } from "node:crypto";
import type {
  V1Affinity,
  V1Container,
  V1EnvVar,
  V1ObjectMeta,
  V1PersistentVolumeClaim,
  V1PersistentVolumeClaimSpec,
  V1Pod,
  V1PodDisruptionBudget,
  V1PodSecurityContext,
  V1ResourceRequirements,
  V1Service,
  V1Toleration,
  V1Volume,
} from "@kubernetes/client-node";
import {
  DEFAULT_BUSYBOX_IMAGE,
  type EtcdCluster,
  type NormalizedSpec,
  type PodPolicy,
} from "./api/etcd-cluster.ts";
import { memberLabels, ownerReference } from "./kube.ts";

export const CLIENT_PORT = 2379;
export const PEER_PORT = 2380;
const DATA_MOUNT = "/var/etcd";
export const DATA_DIR = `${DATA_MOUNT}/data`;
export const VERSION_ANNOTATION = "etcd.version";
/** On each pod of a bootstrap: every member name of that bootstrap, comma-separated. */
export const BOOTSTRAP_ANNOTATION = "etcd.database.coreos.com/bootstrap-members";
/** On each member pod, as coreos labelled them: the member (pod) name. */
export const NODE_LABEL = "etcd_node";
/**
 * coreos's annotation on its Services; Kubernetes has long ignored it for publishNotReadyAddresses,
 * which the peer Service sets. Kept on the peer Service only: where it was honoured, on the client
 * Service it sent clients to members that were not Ready.
 */
export const TOLERATE_UNREADY_ANNOTATION = "service.alpha.kubernetes.io/tolerate-unready-endpoints";
/** On a member's PersistentVolumeClaim: the member (pod) name it holds the data of. */
export const MEMBER_LABEL = "etcd_member";

const ALPHABET = "bcdfghjklmnpqrstvwxz2456789";

/** `<cluster>-<10 random chars>`, like the coreos operator's member names. */
export function newMemberName(clusterName: string): string {
  const bytes = randomBytes(10);
  let suffix = "";
  for (const byte of bytes) suffix += ALPHABET[byte % ALPHABET.length];
  return `${clusterName}-${suffix}`;
}

/**
 * `<pod>.<cluster>.<ns>.svc`, with spec.pod.ClusterDomain appended when given (".cluster.local" and
 * "cluster.local" both give `….svc.cluster.local`).
 */
export function memberHost(name: string, clusterName: string, namespace: string, clusterDomain = ""): string {
  const domain = clusterDomain.replace(/^\./, "");
  return `${name}.${clusterName}.${namespace}.svc${domain ? `.${domain}` : ""}`;
}

export function peerURL(
  name: string,
  clusterName: string,
  namespace: string,
  clusterDomain?: string,
): string {
  return `http://${memberHost(name, clusterName, namespace, clusterDomain)}:${PEER_PORT}`;
}

export function clientURL(
  name: string,
  clusterName: string,
  namespace: string,
  clusterDomain?: string,
): string {
  return `http://${memberHost(name, clusterName, namespace, clusterDomain)}:${CLIENT_PORT}`;
}

/** The PersistentVolumeClaim holding a member's data dir when spec.pod.persistentVolumeClaimSpec is set (coreos's name). */
export function memberClaimName(memberName: string): string {
  return `${memberName}-pvc`;
}

/** The member a claim made by memberClaimName belongs to. */
export function memberNameOfClaim(claimName: string): string | undefined {
  return claimName.endsWith("-pvc") ? claimName.slice(0, -"-pvc".length) : undefined;
}

export function clientServiceName(clusterName: string): string {
  return `${clusterName}-client`;
}

/** The pod name a peer URL points at (`http://<pod>.<cluster>.<ns>.svc:2380` → `<pod>`). */
export function memberNameFromPeerURL(url: string): string | undefined {
  try {
    return new URL(url).hostname.split(".")[0] || undefined;
  } catch {
    return undefined;
  }
}

export function imageOf(spec: NormalizedSpec): string {
  return `${spec.repository}:v${spec.version}`;
}

export interface MemberPodInput {
  cluster: EtcdCluster;
  spec: NormalizedSpec;
  name: string;
  /** name=peerURL pairs of every member the new one must know, itself included. */
  initialCluster: { name: string; peerURL: string }[];
  state: "new" | "existing";
}

function etcdCommand(input: MemberPodInput): string[] {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const clusterName = input.cluster.metadata?.name ?? "";
  const domain = input.spec.pod.ClusterDomain;
  const args = [
    "/usr/local/bin/etcd",
    `--name=${input.name}`,
    `--data-dir=${DATA_DIR}`,
    `--listen-client-urls=http://0.0.0.0:${CLIENT_PORT}`,
    `--advertise-client-urls=${clientURL(input.name, clusterName, namespace, domain)}`,
    `--listen-peer-urls=http://0.0.0.0:${PEER_PORT}`,
    `--initial-advertise-peer-urls=${peerURL(input.name, clusterName, namespace, domain)}`,
    `--initial-cluster=${input.initialCluster.map((m) => `${m.name}=${m.peerURL}`).join(",")}`,
    `--initial-cluster-state=${input.state}`,
  ];
  // The token only matters when a cluster is born; the cluster's UID makes it unique.
  if (input.state === "new")
    args.push(`--initial-cluster-token=${input.cluster.metadata?.uid ?? clusterName}`);
  const quota = input.spec.maintenance.quotaBackendBytes;
  if (quota !== undefined) args.push(`--quota-backend-bytes=${quota}`);
  // The user's extra flags come last; the validator refused any the operator owns.
  args.push(...(input.spec.pod.etcdArgs ?? []));
  return args;
}

/**
 * coreos's check-dns init container: etcd exits when its own peer URL does not resolve yet, so the
 * pod waits for its DNS name first (forever, or DNSTimeoutInSecond). The host name reaches the shell
 * as a variable, never spliced into the script.
 *
 * coreos looked again every second. The name is published a moment after the pod gets its IP, so
 * the first look nearly always misses, and the one-second sleep then held every new member back by
 * a second (in one bench/convergence.ts run, 38 of 40 new pods spent 1.02-1.09 s in check-dns).
 * For its first 30 misses it looks every 100 ms (`|| sleep 1` where a sleep takes no fractions),
 * then every second, so a name that never comes does not cost the DNS server ten lookups a second.
 *
 * A member back on its volume (heal, node drain) starts from its write-ahead log: etcd then checks
 * no URL and resolves nothing before it serves, and the leader's messages come over the streams the
 * member dials itself. Its pod skips the wait, which held each heal back by a lookup and a 100 ms
 * sleep, as the name moves to the new pod's address.
 */
export const DNS_WAIT_SCRIPT = [
  'if [ -d "$WAL_DIR" ]; then',
  '  echo "no DNS wait: the member\'s write-ahead log is on its volume, etcd starts from it" | tee "$MESSAGE_FILE"',
  "  exit 0",
  "fi",
  "deadline=$(( $(date +%s) + TIMEOUT_SECONDS ))",
  "tries=0",
  'until nslookup "$MEMBER_HOST" >/dev/null 2>&1; do',
  '  if [ "$TIMEOUT_SECONDS" -gt 0 ] && [ "$(date +%s)" -gt "$deadline" ]; then',
  '    echo "timed out waiting for DNS name $MEMBER_HOST" >&2',
  "    exit 1",
  "  fi",
  "  tries=$((tries + 1))",
  '  if [ "$tries" -le 30 ]; then sleep 0.1 2>/dev/null || sleep 1; else sleep 1; fi',
  "done",
].join("\n");

function dnsWaitContainer(input: MemberPodInput): V1Container {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const clusterName = input.cluster.metadata?.name ?? "";
  const policy = input.spec.pod;
  return {
    name: "check-dns",
    image: policy.busyboxImage ?? DEFAULT_BUSYBOX_IMAGE,
    command: ["/bin/sh", "-c", DNS_WAIT_SCRIPT],
    env: [
      { name: "MEMBER_HOST", value: memberHost(input.name, clusterName, namespace, policy.ClusterDomain) },
      { name: "TIMEOUT_SECONDS", value: String(policy.DNSTimeoutInSecond ?? 0) },
      { name: "WAL_DIR", value: `${DATA_DIR}/member/wal` },
      // Why it did not wait, in the container's terminated state (`kubectl describe pod`).
      { name: "MESSAGE_FILE", value: "/dev/termination-log" },
    ],
    volumeMounts: [{ name: "etcd-data", mountPath: DATA_MOUNT, readOnly: true }],
  };
}

/**
 * The user's affinity as given; else coreos's `antiAffinity: true` (never two members on one node);
 * else a preference for different nodes, so that with several nodes one node's loss costs one member.
 */
function memberAffinity(policy: PodPolicy, clusterName: string): V1Affinity {
  if (policy.affinity) return policy.affinity as V1Affinity;
  const term = {
    labelSelector: { matchLabels: memberLabels(clusterName) },
    topologyKey: "kubernetes.io/hostname",
  };
  if (policy.antiAffinity)
    return { podAntiAffinity: { requiredDuringSchedulingIgnoredDuringExecution: [term] } };
  return {
    podAntiAffinity: {
      preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 100, podAffinityTerm: term }],
    },
  };
}

/**
 * Whether members must be on different nodes (a required pod anti-affinity, coreos's `antiAffinity`
 * or the user's own): a restore then cannot start its seeds beside the old members.
 */
export function membersMustStayApart(policy: PodPolicy): boolean {
  const required = memberAffinity(policy, "").podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  return (required?.length ?? 0) > 0;
}

/** The member's data volume: its own claim when the spec asks for persistent storage, else an emptyDir. */
function dataVolume(input: MemberPodInput): V1Volume {
  return input.spec.pod.persistentVolumeClaimSpec
    ? { name: "etcd-data", persistentVolumeClaim: { claimName: memberClaimName(input.name) } }
    : { name: "etcd-data", emptyDir: {} };
}

/** The claim for a member's data, owned by the cluster (so deleting the cluster deletes it). */
export function memberClaim(
  cluster: EtcdCluster,
  spec: NormalizedSpec,
  memberName: string,
): V1PersistentVolumeClaim {
  const claimSpec = spec.pod.persistentVolumeClaimSpec as V1PersistentVolumeClaimSpec | undefined;
  return {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: {
      ...ownedMetadata(cluster, memberClaimName(memberName)),
      labels: { ...memberLabels(cluster.metadata?.name ?? ""), [MEMBER_LABEL]: memberName },
    },
    spec: { accessModes: ["ReadWriteOnce"], ...claimSpec },
  };
}

export function memberPod(input: MemberPodInput): V1Pod {
  const { cluster, spec, name } = input;
  const namespace = cluster.metadata?.namespace ?? "default";
  const clusterName = cluster.metadata?.name ?? "";
  const policy = spec.pod ?? {};
  const container: V1Container = {
    name: "etcd",
    image: imageOf(spec),
    command: etcdCommand(input),
    ports: [
      { name: "client", containerPort: CLIENT_PORT },
      { name: "peer", containerPort: PEER_PORT },
    ],
    env: (policy.etcdEnv ?? []) as V1EnvVar[],
    // /health answers 200 only when the member has a leader and no alarm, NOSPACE excepted: a member
    // out of space still serves reads and deletes, and the operator recovers the space (it reads the
    // alarm from the member's Status); taking every member out of the client Service would stop
    // those too. Every second: the first
    // probe runs as the container starts, before etcd listens, so a new member (create, heal,
    // scale, restore) is Ready up to one period after it serves. bench/convergence.ts, period 2 s
    // → 1 s: create 3.97 → 2.66 s, a follower's heal 3.62 → 2.59 s. One /health a second is cheap.
    readinessProbe: {
      httpGet: { path: "/health?exclude=NOSPACE", port: CLIENT_PORT },
      periodSeconds: 1,
      timeoutSeconds: 1,
      // Not Ready after 6 s of failures, as at 3 × 2 s before: a leader election is no reason to
      // take a member out of its Service.
      failureThreshold: 6,
    },
    livenessProbe: {
      tcpSocket: { port: CLIENT_PORT },
      initialDelaySeconds: 10,
      periodSeconds: 10,
      timeoutSeconds: 5,
      failureThreshold: 6,
    },
    volumeMounts: [{ name: "etcd-data", mountPath: DATA_MOUNT }],
    resources: policy.resources as V1ResourceRequirements | undefined,
  };
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace,
      // coreos's three labels: `etcd_node` names the member, for users' selectors and dashboards.
      labels: { ...(policy.labels ?? {}), ...memberLabels(clusterName), [NODE_LABEL]: name },
      annotations: { ...(policy.annotations ?? {}), [VERSION_ANNOTATION]: spec.version },
      ownerReferences: [ownerReference(cluster)],
    },
    spec: {
      hostname: name,
      subdomain: clusterName,
      // A crashed etcd restarts in place with its data dir; a lost pod is replaced by the operator.
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 30,
      automountServiceAccountToken: false,
      initContainers: [dnsWaitContainer(input)],
      containers: [container],
      volumes: [dataVolume(input)],
      nodeSelector: policy.nodeSelector,
      // Embedded Kubernetes types are kept as-is by the CRD schema; the API server validates them here.
      tolerations: policy.tolerations as V1Toleration[] | undefined,
      securityContext: policy.securityContext as V1PodSecurityContext | undefined,
      affinity: memberAffinity(policy, clusterName),
      priorityClassName: policy.priorityClassName,
    },
  };
}

/** Metadata of an object the cluster owns: its labels, and an owner reference for the garbage collector. */
function ownedMetadata(cluster: EtcdCluster, name: string): V1ObjectMeta {
  return {
    name,
    namespace: cluster.metadata?.namespace,
    labels: memberLabels(cluster.metadata?.name ?? ""),
    ownerReferences: [ownerReference(cluster)],
  };
}

/** The headless Service that gives members their DNS names; not-ready members are published too. */
export function peerService(cluster: EtcdCluster): V1Service {
  const clusterName = cluster.metadata?.name ?? "";
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: {
      ...ownedMetadata(cluster, clusterName),
      annotations: { [TOLERATE_UNREADY_ANNOTATION]: "true" },
    },
    spec: {
      clusterIP: "None",
      publishNotReadyAddresses: true,
      selector: memberLabels(clusterName),
      ports: [
        { name: "client", port: CLIENT_PORT, targetPort: CLIENT_PORT },
        { name: "peer", port: PEER_PORT, targetPort: PEER_PORT },
      ],
    },
  };
}

/** The Service clients use: ready members only. */
export function clientService(cluster: EtcdCluster): V1Service {
  const clusterName = cluster.metadata?.name ?? "";
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: ownedMetadata(cluster, clientServiceName(clusterName)),
    spec: {
      selector: memberLabels(clusterName),
      ports: [{ name: "client", port: CLIENT_PORT, targetPort: CLIENT_PORT }],
    },
  };
}

/** Voluntary disruptions (node drains, evictions) may never take the cluster below quorum. */
export function quorumBudget(cluster: EtcdCluster, size: number): V1PodDisruptionBudget {
  const clusterName = cluster.metadata?.name ?? "";
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: ownedMetadata(cluster, clusterName),
    spec: { minAvailable: Math.floor(size / 2) + 1, selector: { matchLabels: memberLabels(clusterName) } },
  };
}

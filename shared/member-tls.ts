// TLS on a member pod (spec.TLS.static): https URLs, etcd's certificate flags, and the files they
// point at.
//
// Why each member gets its own copy of the certificates instead of mounting the user's Secrets:
// a kubelet refreshes Secret volumes in running pods, and etcd re-reads its certificate and key
// on every handshake. Mounted directly, a changed Secret would reach every member at about the
// same time, checked or not; one wrong certificate would cut every member off at once. So the
// operator checks the Secrets (tls-secrets.ts) and writes the checked material into an immutable
// Secret `<member>-tls` when it creates the member, and the pod mounts that. A member's
// certificates never change while it runs; new ones come with new members, one at a time, through
// the planner (add a member with the new material, then remove one with the old, followers first,
// the leader last; see plan.ts). This also covers a new CA: etcd reads its trusted CA files only
// at start, so a CA change needs new processes anyway.
//
// The copy is owned by its pod, so the garbage collector removes it with the member.
import { createHash } from "node:crypto";
import type { V1Container, V1Pod, V1Secret } from "@kubernetes/client-node";
import type { NormalizedSpec } from "./api/etcd-cluster.ts";
import { type EtcdCluster, GROUP, VERSION } from "./api/etcd-cluster.ts";
import { type Kube, MERGE_PATCH } from "./kube.ts";
import { ignoreConflict } from "./kube-errors.ts";
import { memberClaim, memberHost, PEER_PORT } from "./member-pods.ts";
import { type MemberTlsMaterial, PEER_KEYS, SERVER_KEYS } from "./tls-secrets.ts";

/** On each TLS member pod: the digest of the certificates it was created with. */
export const TLS_HASH_ANNOTATION = "etcd.database.coreos.com/tls-hash";
/** Where the member's certificates are mounted (the coreos operator's directory). */
export const MEMBER_TLS_DIR = "/etc/etcdtls/member";
/**
 * With client TLS (and client certificate auth) the kubelet cannot probe /health on the client
 * port; etcd serves /health and /metrics, and nothing else, in plain HTTP here instead.
 */
export const ETCD_METRICS_PORT = 2381;
const VOLUME = "member-tls";

export function peerTlsOn(spec: NormalizedSpec): boolean {
  return Boolean(spec.TLS?.static?.member?.peerSecret);
}

export function clientTlsOn(spec: NormalizedSpec): boolean {
  return Boolean(spec.TLS?.static?.member?.serverSecret);
}

export function memberPeerURL(spec: NormalizedSpec, name: string, clusterName: string, namespace: string) {
  return `${peerTlsOn(spec) ? "https" : "http"}://${memberHost(name, clusterName, namespace, spec.pod.ClusterDomain)}:${PEER_PORT}`;
}

/** The name of a member's own copy of its certificates. */
export function memberTlsSecretName(podName: string): string {
  return `${podName}-tls`;
}

/** `--flag=http://…` → `--flag=https://…` for the flags whose scheme TLS decides. */
function withScheme(args: string[], flags: string[], scheme: "https"): string[] {
  return args.map((arg) => {
    const flag = flags.find((f) => arg.startsWith(`${f}=`));
    return flag ? `${flag}=${arg.slice(flag.length + 1).replace(/^http:\/\//, `${scheme}://`)}` : arg;
  });
}

function file(key: string): string {
  return `${MEMBER_TLS_DIR}/${key}`;
}

/**
 * The member pod with TLS: https URLs, certificate flags (client certificate auth on both ports,
 * as coreos did: only holders of a certificate from the configured CA get in), the member's
 * certificate copy mounted, and the readiness probe moved to the plain /health endpoint.
 * `tls` undefined: the pod as it is (a cluster without TLS).
 */
export function withMemberTls(pod: V1Pod, tls: MemberTlsMaterial | undefined): V1Pod {
  if (!tls || (!tls.peer && !tls.server)) return pod;
  const name = pod.metadata?.name ?? "";
  const containers = (pod.spec?.containers ?? []).map((c): V1Container => {
    if (c.name !== "etcd") return c;
    let command = c.command ?? [];
    if (tls.peer) {
      command = withScheme(command, ["--listen-peer-urls", "--initial-advertise-peer-urls"], "https");
      command = [
        ...command,
        "--peer-client-cert-auth=true",
        `--peer-trusted-ca-file=${file(PEER_KEYS.ca)}`,
        `--peer-cert-file=${file(PEER_KEYS.cert)}`,
        `--peer-key-file=${file(PEER_KEYS.key)}`,
      ];
    }
    let probes: Partial<V1Container> = {};
    if (tls.server) {
      command = withScheme(command, ["--listen-client-urls", "--advertise-client-urls"], "https");
      command = [
        ...command,
        "--client-cert-auth=true",
        `--trusted-ca-file=${file(SERVER_KEYS.ca)}`,
        `--cert-file=${file(SERVER_KEYS.cert)}`,
        `--key-file=${file(SERVER_KEYS.key)}`,
        `--listen-metrics-urls=http://0.0.0.0:${ETCD_METRICS_PORT}`,
      ];
      probes = {
        readinessProbe: c.readinessProbe?.httpGet
          ? { ...c.readinessProbe, httpGet: { ...c.readinessProbe.httpGet, port: ETCD_METRICS_PORT } }
          : c.readinessProbe,
        ports: [...(c.ports ?? []), { name: "metrics", containerPort: ETCD_METRICS_PORT }],
      };
    }
    return {
      ...c,
      ...probes,
      command,
      volumeMounts: [...(c.volumeMounts ?? []), { name: VOLUME, mountPath: MEMBER_TLS_DIR, readOnly: true }],
    };
  });
  return {
    ...pod,
    metadata: {
      ...pod.metadata,
      annotations: { ...pod.metadata?.annotations, [TLS_HASH_ANNOTATION]: tls.hash },
    },
    spec: {
      ...pod.spec,
      containers,
      volumes: [
        ...(pod.spec?.volumes ?? []),
        // The default file mode (0644), as coreos mounted its Secrets: an etcd container running as
        // another user (spec.pod.securityContext) can still read its key; no other container is in the pod.
        { name: VOLUME, secret: { secretName: memberTlsSecretName(name) } },
      ],
    },
  };
}

/** A member's own, immutable copy of its certificates (coreos key names, as the flags expect). */
export function memberTlsSecret(cluster: EtcdCluster, podName: string, tls: MemberTlsMaterial): V1Secret {
  const data: Record<string, string> = {};
  const put = (key: string, value: string) => {
    data[key] = Buffer.from(value).toString("base64");
  };
  if (tls.peer) {
    put(PEER_KEYS.cert, tls.peer.cert);
    put(PEER_KEYS.key, tls.peer.key);
    put(PEER_KEYS.ca, tls.peer.ca);
  }
  if (tls.server) {
    put(SERVER_KEYS.cert, tls.server.cert);
    put(SERVER_KEYS.key, tls.server.key);
    put(SERVER_KEYS.ca, tls.server.ca);
  }
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: memberTlsSecretName(podName),
      namespace: cluster.metadata?.namespace,
      labels: {
        app: "etcd",
        etcd_cluster: cluster.metadata?.name ?? "",
        "etcd.database.coreos.com/tls": "member",
      },
      annotations: { [TLS_HASH_ANNOTATION]: tls.hash },
      // Until the pod exists (then the pod owns it), the cluster does, so nothing is ever orphaned.
      ownerReferences: [
        {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: "EtcdCluster",
          name: cluster.metadata?.name ?? "",
          uid: cluster.metadata?.uid ?? "",
        },
      ],
    },
    type: "Opaque",
    immutable: true,
    data,
  };
}

/**
 * Creates a member pod and, for a TLS cluster, its certificate copy first (so the pod can mount it
 * at once), then hands the copy's ownership to the pod. Idempotent: an existing copy is kept (it is
 * immutable; a copy left by an earlier attempt for the same member name holds what that attempt
 * checked, and the pod's hash annotation is taken from it so a rotation still sees the truth).
 */
export async function createMemberPodWithTls(
  kube: Kube,
  cluster: EtcdCluster,
  spec: NormalizedSpec,
  pod: V1Pod,
  tls: MemberTlsMaterial | undefined,
): Promise<void> {
  const namespace = pod.metadata?.namespace ?? "default";
  const name = pod.metadata?.name ?? "";
  // With persistent storage the member's claim comes first (one that exists already, as when a
  // member comes back to its volume, is kept).
  if (spec.pod.persistentVolumeClaimSpec) await kube.createClaim(memberClaim(cluster, spec, name));
  if (!tls || (!tls.peer && !tls.server)) {
    await kube.createPod(pod);
    return;
  }
  const secret = memberTlsSecret(cluster, name, tls);
  await ignoreConflict(kube.core.createNamespacedSecret({ namespace, body: secret }));
  const existing = await kube.core.readNamespacedSecret({ namespace, name: memberTlsSecretName(name) });
  const hash = existing.metadata?.annotations?.[TLS_HASH_ANNOTATION] ?? tls.hash;
  const body: V1Pod = {
    ...pod,
    metadata: { ...pod.metadata, annotations: { ...pod.metadata?.annotations, [TLS_HASH_ANNOTATION]: hash } },
  };
  await kube.createPod(body);
  const created = await kube.getPod(namespace, name);
  if (!created?.metadata?.uid) return;
  await kube.core.patchNamespacedSecret(
    {
      namespace,
      name: memberTlsSecretName(name),
      body: {
        metadata: {
          ownerReferences: [{ apiVersion: "v1", kind: "Pod", name, uid: created.metadata.uid }],
        },
      },
    },
    MERGE_PATCH,
  );
}

/** A short digest for keyed Events (the same problem is counted up, not repeated). */
export function problemKey(text: string): string {
  return createHash("sha256").update(text).digest("hex").slice(0, 16);
}

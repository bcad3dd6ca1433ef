// Cluster DNS without a DNS server: every container's /etc/hosts carries the names cluster DNS
// would answer, rewritten in place whenever pods or Services change.
// - `<hostname>.<subdomain>.<ns>.svc[.cluster.local]` for a pod whose subdomain names a headless
//   Service selecting it (ready pods, or all pods when publishNotReadyAddresses is set);
// - `<svc>.<ns>.svc[.cluster.local]` for a Service → its endpoints' pod IPs (there is no
//   kube-proxy, so even ClusterIP Services resolve straight to ready pods);
// - the short forms (`<hostname>.<subdomain>`, `<svc>`, `<svc>.<ns>`) in pods of the same namespace,
//   since a hosts file has no search list.
import type { V1Pod, V1Service } from "@kubernetes/client-node";

export const CLUSTER_DOMAIN = "cluster.local";

export function isPodReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

function selects(service: V1Service, pod: V1Pod): boolean {
  const selector = service.spec?.selector;
  if (!selector || Object.keys(selector).length === 0) return false;
  const labels = pod.metadata?.labels ?? {};
  return Object.entries(selector).every(([k, v]) => labels[k] === v);
}

function isLive(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return !!pod.status?.podIP && phase !== "Succeeded" && phase !== "Failed";
}

interface Entry {
  ip: string;
  names: string[];
}

/** Records visible from any namespace (fully qualified) and those only from the same namespace. */
export function clusterRecords(
  pods: V1Pod[],
  services: V1Service[],
): { namespace: string; global: Entry; local: Entry }[] {
  const records: { namespace: string; global: Entry; local: Entry }[] = [];
  for (const service of services) {
    const ns = service.metadata?.namespace ?? "default";
    const svc = service.metadata?.name ?? "";
    const publishNotReady = service.spec?.publishNotReadyAddresses === true;
    const headless = service.spec?.clusterIP === "None";
    for (const pod of pods) {
      if (pod.metadata?.namespace !== ns || !isLive(pod) || !selects(service, pod)) continue;
      const ready = isPodReady(pod);
      if (!ready && !publishNotReady) continue;
      const ip = pod.status?.podIP ?? "";
      const global = [`${svc}.${ns}.svc.${CLUSTER_DOMAIN}`, `${svc}.${ns}.svc`];
      const local = [svc, `${svc}.${ns}`];
      const hostname = pod.spec?.hostname;
      if (headless && hostname && pod.spec?.subdomain === svc) {
        global.unshift(`${hostname}.${svc}.${ns}.svc.${CLUSTER_DOMAIN}`, `${hostname}.${svc}.${ns}.svc`);
        local.unshift(`${hostname}.${svc}`, `${hostname}.${svc}.${ns}`);
      }
      records.push({ namespace: ns, global: { ip, names: global }, local: { ip, names: local } });
    }
  }
  return records;
}

/** The full /etc/hosts of one pod. */
export function hostsFileFor(pod: V1Pod, records: ReturnType<typeof clusterRecords>): string {
  const ns = pod.metadata?.namespace ?? "default";
  const hostname = pod.spec?.hostname ?? pod.metadata?.name ?? "localhost";
  const lines = [
    "# Kubernetes-managed hosts file (etcd-operator local kubelet).",
    "127.0.0.1\tlocalhost",
    "::1\tlocalhost ip6-localhost ip6-loopback",
  ];
  const ownIp = pod.status?.podIP;
  if (ownIp) {
    const fqdn = pod.spec?.subdomain ? `${hostname}.${pod.spec.subdomain}.${ns}.svc.${CLUSTER_DOMAIN}` : "";
    lines.push(`${ownIp}\t${[fqdn, hostname].filter(Boolean).join(" ")}`);
  }
  // One line per IP; the same name may sit on several lines (a Service with several pods).
  const byIp = new Map<string, Set<string>>();
  const add = (entry: Entry) => {
    const names = byIp.get(entry.ip) ?? new Set<string>();
    for (const n of entry.names) names.add(n);
    byIp.set(entry.ip, names);
  };
  for (const record of records) {
    add(record.global);
    if (record.namespace === ns) add(record.local);
  }
  for (const [ip, names] of [...byIp].sort(([a], [b]) => a.localeCompare(b))) {
    lines.push(`${ip}\t${[...names].join(" ")}`);
  }
  return `${lines.join("\n")}\n`;
}

// Turns the client URLs an EtcdBackup lists (coreos examples use the client Service,
// "http://example-etcd-cluster-client:2379") into addresses this process can dial. Inside the
// cluster DNS would do; the operator may run outside it (the local control plane, a laptop), so a
// URL naming a Service of the cluster (`svc`, `svc.ns`, `svc.ns.svc[.cluster.local]`) or a member
// pod (`pod.svc.ns.svc`) is resolved through the API to the ready pods' IPs. Anything else (an IP,
// an external name) is used as written.
import { isIP } from "node:net";
import type { V1Pod } from "@kubernetes/client-node";
import type { Kube } from "./kube.ts";

export interface ResolvedEndpoints {
  endpoints: string[];
  /** The etcd_cluster label of the Service's pods, when a Service was resolved. */
  clusterName?: string;
  /** The member pod behind each resolved endpoint. */
  podNames: Record<string, string>;
}

function readyIp(pod: V1Pod): string | undefined {
  const ready = pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
  return ready && !pod.metadata?.deletionTimestamp ? pod.status?.podIP : undefined;
}

function urlWithHost(url: URL, host: string): string {
  return `${url.protocol}//${host}:${url.port || (url.protocol === "https:" ? "443" : "80")}`;
}

/** Splits a cluster-local DNS name into service, namespace and (for a pod name) pod. */
function clusterDnsParts(
  hostname: string,
  namespace: string,
): { service: string; namespace: string; pod?: string } | undefined {
  const parts = hostname.replace(/\.cluster\.local$/, "").split(".");
  if (parts.length === 1) return { service: parts[0] ?? "", namespace };
  if (parts.length === 2) return { service: parts[0] ?? "", namespace: parts[1] ?? namespace };
  if (parts.length === 3 && parts[2] === "svc")
    return { service: parts[0] ?? "", namespace: parts[1] ?? namespace };
  if (parts.length === 4 && parts[3] === "svc")
    return { pod: parts[0], service: parts[1] ?? "", namespace: parts[2] ?? namespace };
  return undefined;
}

export async function resolveClientEndpoints(
  kube: Kube,
  namespace: string,
  urls: readonly string[],
): Promise<ResolvedEndpoints> {
  const endpoints: string[] = [];
  let clusterName: string | undefined;
  const podNames: Record<string, string> = {};
  for (const raw of urls) {
    let url: URL;
    try {
      url = new URL(raw);
    } catch (error) {
      throw new Error(`etcd endpoint "${raw}" is not a URL (e.g. http://example-etcd-cluster-client:2379)`, {
        cause: error,
      });
    }
    const dns = isIP(url.hostname) ? undefined : clusterDnsParts(url.hostname, namespace);
    const service = dns ? await kube.getService(dns.namespace, dns.service) : undefined;
    const selector = service?.spec?.selector;
    if (!dns || !service || !selector) {
      endpoints.push(raw);
      continue;
    }
    clusterName ??= selector.etcd_cluster;
    const labelSelector = Object.entries(selector)
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    const pods = await kube.listPods(dns.namespace, labelSelector);
    for (const pod of pods) {
      if (dns.pod && pod.metadata?.name !== dns.pod) continue;
      const ip = readyIp(pod);
      if (!ip) continue;
      const endpoint = urlWithHost(url, ip);
      endpoints.push(endpoint);
      podNames[endpoint] = pod.metadata?.name ?? ip;
    }
  }
  return { endpoints: [...new Set(endpoints)], clusterName, podNames };
}

// Names and addresses of an instance's real nodes. Each node is a network namespace on the
// instance's bridge (as kind gives each node a container on a Docker network) with its own
// containerd, kubelet and kube-proxy, its own pod subnet and its own cgroup subtree. Every kernel
// object carries the instance's prefix, so the instance's cleanup finds what a crashed run left.
import { join } from "node:path";
import type { InstanceLayout } from "../layout.ts";

/** The most real nodes an instance runs: each takes a /27 of the instance's pod /24. */
export const MAX_REAL_NODES = 7;
/** Where the cluster DNS Service listens (kubeadm's choice: the tenth address of the range). */
export const CLUSTER_DNS_IP = "10.96.0.10";
export const CLUSTER_DOMAIN = "cluster.local";

export interface RealNodeLayout {
  /** The Kubernetes node name, also its hostname. */
  name: string;
  index: number;
  /** Under /var/run/netns; the instance's pod-netns prefix, so its cleanup removes it. */
  netns: string;
  vethHost: string;
  /** The node's address on the instance's bridge. */
  ip: string;
  /** This node's pods' subnet (a /27), routed to the node by the host and by the other nodes. */
  podCidr: string;
  /** The node's cgroup (in each v1 hierarchy, or in the v2 tree): its pods live below. */
  cgroupRoot: string;
  dir: string;
  containerdSocket: string;
}

/** Every real node's pods: kube-proxy's --cluster-cidr. */
export function clusterPodCidr(instance: InstanceLayout): string {
  return `${podBase(instance)}.0/24`;
}

function podBase(instance: InstanceLayout): string {
  return instance.network.base.replace(/^10\.78\./, "10.79.");
}

export function nodesDir(instance: InstanceLayout): string {
  return join(instance.dir, "nodes");
}

export function realNodeLayouts(instance: InstanceLayout, count: number): RealNodeLayout[] {
  if (!Number.isInteger(count) || count < 1 || count > MAX_REAL_NODES) {
    throw new Error(`real nodes: between 1 and ${MAX_REAL_NODES}, not ${count}`);
  }
  const slot = instance.network.netnsPrefix.replace(/^eop|-$/g, "");
  return Array.from({ length: count }, (_, i) => {
    const index = i + 1;
    const dir = join(nodesDir(instance), `node${index}`);
    return {
      name: `node-${index}`,
      index,
      netns: `${instance.network.netnsPrefix}node${index}`,
      vethHost: `${instance.network.vethPrefix}node${index}`,
      ip: `${instance.network.base}.${200 + index}`,
      podCidr: `${podBase(instance)}.${32 * index}/27`,
      cgroupRoot: `/eop${slot}-node${index}`,
      dir,
      containerdSocket: join(dir, "containerd.sock"),
    };
  });
}

// Where a local cluster keeps its files, and how its names and addresses are derived from the
// instance name. Several instances can run side by side (tests use their own), so every kernel
// object they create (bridge, network namespaces, veths) carries a per-instance prefix: a start
// after a crash can then find and remove exactly what that instance left behind.
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface NetworkLayout {
  bridge: string;
  /** e.g. "10.78.3.0/24" */
  cidr: string;
  gateway: string;
  prefixLength: number;
  /** First three octets; pods get .2 … .254 */
  base: string;
  /** Prefix of every network namespace of this instance's pods. */
  netnsPrefix: string;
  /** Prefix of every host-side veth of this instance's pods. */
  vethPrefix: string;
}

export interface InstanceLayout {
  name: string;
  dir: string;
  pkiDir: string;
  logDir: string;
  etcdDataDir: string;
  kubeletDir: string;
  kubeconfigPath: string;
  statePath: string;
  network: NetworkLayout;
}

export const DEFAULT_INSTANCE = "default";

/**
 * The Services' ClusterIP range. With the process kubelet these addresses are allocated but never
 * routed (no kube-proxy; names resolve to pod IPs); real nodes run kube-proxy.
 */
export const SERVICE_CIDR = "10.96.0.0/24";

export function runRoot(): string {
  return process.env.EOP_RUN_DIR ?? join(tmpdir(), "etcd-operator-local");
}

const INSTANCE_NAME = /^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$/;

export function validateInstanceName(name: string): void {
  if (!INSTANCE_NAME.test(name)) {
    throw new Error(`local cluster name "${name}" must be 1-32 lowercase letters, digits or '-'`);
  }
}

/**
 * A slot 0-199 per instance picks its subnet (10.78.<slot>.0/24) and kernel object names. The
 * default instance takes slot 0; others hash into 1-199, so two names rarely collide, and a start
 * refuses to run when the slot's bridge already belongs to another live instance.
 */
export function instanceSlot(name: string): number {
  if (name === DEFAULT_INSTANCE) return 0;
  const digest = createHash("sha256").update(name).digest();
  return 1 + (digest.readUInt16BE(0) % 199);
}

export function networkLayout(slot: number): NetworkLayout {
  const base = `10.78.${slot}`;
  return {
    bridge: `eopbr${slot}`,
    cidr: `${base}.0/24`,
    gateway: `${base}.1`,
    prefixLength: 24,
    base,
    netnsPrefix: `eop${slot}-`,
    vethPrefix: `eop${slot}v`,
  };
}

export function instanceLayout(name: string): InstanceLayout {
  validateInstanceName(name);
  const dir = join(runRoot(), name);
  return {
    name,
    dir,
    pkiDir: join(dir, "pki"),
    logDir: join(dir, "logs"),
    etcdDataDir: join(dir, "etcd"),
    kubeletDir: join(dir, "kubelet"),
    kubeconfigPath: join(dir, "kubeconfig"),
    statePath: join(dir, "state.json"),
    network: networkLayout(instanceSlot(name)),
  };
}

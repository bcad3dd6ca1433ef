// Real nodes for the local cluster: each a network namespace on the instance's bridge with
// containerd + runc, kubelet and kube-proxy (iptables mode) built from Kubernetes's own module, a
// CNI bridge for its pods, routes so that every node and the host reach every pod, and CoreDNS as
// the cluster DNS Service, as kubeadm sets it up. Started and torn down by control-plane.ts.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { CertificateAuthority } from "../../../shared/pki.ts";
import type { Assets } from "../assets.ts";
import { isOurProcess, type PidRecord, readPidFile, stopDaemon, tailFile, waitUntil } from "../daemons.ts";
import { createPodNetwork, deletePodNetwork } from "../kubelet/sandbox.ts";
import { type InstanceLayout, SERVICE_CIDR } from "../layout.ts";
import { importImages, startContainerd } from "./containerd.ts";
import { createNodeCgroup, removeNodeCgroup, unmountUnder } from "./host-state.ts";
import {
  CLUSTER_DNS_IP,
  clusterPodCidr,
  MAX_REAL_NODES,
  nodesDir,
  type RealNodeLayout,
  realNodeLayouts,
} from "./layout.ts";
import { type AgentContext, startKubelet, startKubeProxy } from "./node-agents.ts";

const run = promisify(execFile);
const AGENTS = ["kubelet", "kube-proxy", "containerd"] as const;
const NODE_READY_TIMEOUT_MS = 90_000;
const DNS_READY_TIMEOUT_MS = 120_000;

export interface RealNodesOptions {
  instance: InstanceLayout;
  count: number;
  assets: Assets;
  ca: CertificateAuthority;
  caFile: string;
  apiserverUrl: string;
  /** The admin kubeconfig, for kubectl. */
  kubeconfigPath: string;
  /** OCI archives imported into every node's containerd. */
  images: string[];
  sandboxImage: string;
  corednsImage: string;
  log: (line: string) => void;
}

function pidFileOf(instance: InstanceLayout, node: RealNodeLayout, agent: string): string {
  return join(instance.dir, `${node.name}-${agent}.pid`);
}

function logFileOf(node: RealNodeLayout, agent: string): string {
  return join(node.dir, `${agent}.log`);
}

async function nsenterNet(node: RealNodeLayout, command: string[]): Promise<void> {
  await run("nsenter", [`--net=/var/run/netns/${node.netns}`, "--", ...command]);
}

/** The node's network: its namespace on the bridge, forwarding for its pods, routes to every pod subnet. */
async function wireNode(o: RealNodesOptions, node: RealNodeLayout, all: RealNodeLayout[]): Promise<void> {
  const net = o.instance.network;
  await createPodNetwork({
    netns: node.netns,
    ip: node.ip,
    prefixLength: net.prefixLength,
    gateway: net.gateway,
    bridge: net.bridge,
    vethHost: node.vethHost,
  });
  // kube-proxy's Service rules see bridged pod-to-pod packets only with br_netfilter on.
  if (!existsSync("/proc/sys/net/bridge/bridge-nf-call-iptables")) {
    throw new Error(
      "real nodes need the br_netfilter kernel module (modprobe br_netfilter): kube-proxy's rules must see bridged traffic",
    );
  }
  await nsenterNet(node, [
    "sysctl",
    "-q",
    "-w",
    "net.ipv4.ip_forward=1",
    "net.bridge.bridge-nf-call-iptables=1",
  ]);
  await run("ip", ["route", "replace", node.podCidr, "via", node.ip, "dev", net.bridge]);
  for (const other of all) {
    if (other.name === node.name) continue;
    await run("ip", ["-n", node.netns, "route", "replace", other.podCidr, "via", other.ip, "dev", "eth0"]);
  }
}

async function startNode(
  o: RealNodesOptions,
  node: RealNodeLayout,
  all: RealNodeLayout[],
): Promise<PidRecord[]> {
  mkdirSync(node.dir, { recursive: true });
  await createNodeCgroup(node.cgroupRoot);
  await wireNode(o, node, all);
  const containerd = await startContainerd(
    node,
    o.sandboxImage,
    logFileOf(node, "containerd"),
    pidFileOf(o.instance, node, "containerd"),
  );
  await importImages(node, o.images);
  const ctx: AgentContext = {
    node,
    build: o.assets.node,
    ca: o.ca,
    caFile: o.caFile,
    apiserverUrl: o.apiserverUrl,
    logFile: (agent) => logFileOf(node, agent),
    pidFile: (agent) => pidFileOf(o.instance, node, agent),
  };
  const kubelet = await startKubelet(ctx);
  const proxy = await startKubeProxy(ctx, clusterPodCidr(o.instance));
  return [containerd, kubelet, proxy];
}

async function kubectl(o: RealNodesOptions, args: string[]): Promise<string> {
  const { stdout } = await run(o.assets.kubectl, ["--kubeconfig", o.kubeconfigPath, ...args], {
    maxBuffer: 16 * 1024 * 1024,
  });
  return stdout;
}

async function readyNodes(o: RealNodesOptions): Promise<string[]> {
  const list = JSON.parse(await kubectl(o, ["get", "nodes", "-o", "json"])) as {
    items: { metadata: { name: string }; status?: { conditions?: { type: string; status: string }[] } }[];
  };
  return list.items
    .filter((n) => n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"))
    .map((n) => n.metadata.name);
}

async function deployCoredns(o: RealNodesOptions): Promise<void> {
  const manifest = readFileSync(new URL("./coredns.yaml", import.meta.url), "utf8")
    .replaceAll("__IMAGE__", o.corednsImage)
    .replaceAll("__DNS_IP__", CLUSTER_DNS_IP);
  const file = join(nodesDir(o.instance), "coredns.yaml");
  writeFileSync(file, manifest);
  await kubectl(o, ["apply", "-f", file]);
  await kubectl(o, [
    "--namespace=kube-system",
    "rollout",
    "status",
    "deployment/coredns",
    `--timeout=${DNS_READY_TIMEOUT_MS / 1000}s`,
  ]);
}

/**
 * Starts `count` real nodes and the cluster DNS; resolves once every node is Ready and CoreDNS
 * serves. A node part that fails to start names its log; the caller tears everything down.
 */
export async function startRealNodes(o: RealNodesOptions): Promise<RealNodeLayout[]> {
  const nodes = realNodeLayouts(o.instance, o.count);
  const started = Date.now();
  const agents = (
    await Promise.all(
      nodes.map(async (node) =>
        (
          await startNode(o, node, nodes)
        ).map((record) => ({
          node,
          record,
          // Records are named "<node> <agent>", their logs "<agent>.log".
          log: logFileOf(node, record.name.slice(node.name.length + 1)),
        })),
      ),
    )
  ).flat();
  // The host (kube-apiserver calling a webhook, a test) reaches ClusterIPs as a control-plane node
  // with kube-proxy would: through the first node's rules, which masquerade what does not come
  // from a pod, so the answer comes back the same way.
  const [first] = nodes;
  if (first) await routeServicesVia(o.instance, first);
  o.log(`${nodes.length} node(s): containerd, kubelet and kube-proxy started; waiting for Ready`);
  await waitUntil(async () => (await readyNodes(o)).length === nodes.length, {
    what: `real nodes ${nodes.map((n) => n.name).join(", ")} Ready`,
    timeoutMs: NODE_READY_TIMEOUT_MS,
    intervalMs: 250,
    alive: () => agents.every((a) => isOurProcess(a.record)),
    logFile: nodes[0] && logFileOf(nodes[0], "kubelet"),
  }).catch((error: unknown) => {
    // The log of the agent that exited, not the first kubelet's.
    const dead = agents.find((a) => !isOurProcess(a.record));
    if (!dead) throw error;
    throw new Error(
      // The start's cleanup removes the node's folder; ETCD_OPERATOR_KEEP_LOGS=DIR keeps its logs.
      `${dead.record.name} exited while the node started; the last lines of ${dead.log}:\n` +
        tailFile(dead.log, 10),
      { cause: error },
    );
  });
  o.log(`nodes Ready in ${((Date.now() - started) / 1000).toFixed(1)} s; deploying CoreDNS`);
  await deployCoredns(o).catch((error: unknown) => {
    const logs = nodes.map((n) => `--- ${n.name} kubelet ---\n${tailFile(logFileOf(n, "kubelet"), 10)}`);
    throw new Error(`CoreDNS did not become ready\n${logs.join("\n")}`, { cause: error });
  });
  return nodes;
}

/** The node agent's process, when it runs. */
function runningAgent(instance: InstanceLayout, node: RealNodeLayout, agent: string): PidRecord | undefined {
  const record = readPidFile(pidFileOf(instance, node, agent));
  return record && isOurProcess(record) ? record : undefined;
}

async function routeServicesVia(instance: InstanceLayout, node: RealNodeLayout): Promise<void> {
  await run("ip", ["route", "replace", SERVICE_CIDR, "via", node.ip, "dev", instance.network.bridge]);
}

/**
 * A node lost as a machine is lost: its agents and containers SIGKILLed, its network link down (so
 * its addresses stop answering rather than refuse). Its pods stay in the API as the node left them;
 * the instance's cleanup removes what remains.
 */
export async function loseRealNode(instance: InstanceLayout, name: string): Promise<void> {
  const node = realNodeLayouts(instance, MAX_REAL_NODES).find((n) => n.name === name);
  if (!node || !existsSync(node.dir)) throw new Error(`no real node ${name} in this instance`);
  for (const agent of AGENTS) {
    const record = runningAgent(instance, node, agent);
    if (record) await stopDaemon(record, 0);
  }
  await removeNodeCgroup(node.cgroupRoot);
  await run("ip", ["-n", node.netns, "link", "set", "dev", "eth0", "down"]);
  // The host's way to the ClusterIPs stands in for a control-plane node's own kube-proxy, which a
  // worker's loss does not take down: it moves to a node still up.
  const { stdout } = await run("ip", ["route", "show", SERVICE_CIDR]);
  if (stdout.includes(` via ${node.ip} `)) {
    const up = realNodeLayouts(instance, MAX_REAL_NODES).find(
      (n) => n.name !== name && runningAgent(instance, n, "kube-proxy") !== undefined,
    );
    if (up) await routeServicesVia(instance, up);
  }
}

/**
 * Stops every real node of the instance (also those a crashed run left): its agents, the
 * containers in its cgroups, its namespace, and the mounts under its directory.
 */
export async function cleanupRealNodes(instance: InstanceLayout, log: (line: string) => void): Promise<void> {
  if (!existsSync(nodesDir(instance))) return;
  const present = new Set(readdirSync(nodesDir(instance)));
  const nodes = realNodeLayouts(instance, MAX_REAL_NODES).filter((n) => present.has(`node${n.index}`));
  for (const agent of AGENTS) {
    for (const node of nodes) {
      const record = runningAgent(instance, node, agent);
      if (record) {
        log(`stopping ${node.name} ${agent} (pid ${record.pid})`);
        await stopDaemon(record, agent === "kubelet" ? 5_000 : 10_000);
      }
    }
  }
  for (const node of nodes) await removeNodeLeftovers(node);
  await unmountUnder(nodesDir(instance));
}

/** What a stopped node leaves in the kernel: its containers' cgroups, its namespace, shim sockets. */
async function removeNodeLeftovers(node: RealNodeLayout): Promise<void> {
  await removeNodeCgroup(node.cgroupRoot);
  const shimSockets = shimSocketsOf(node);
  // The containerd shims live in the node's namespace: they go with it, leaving their sockets.
  await deletePodNetwork(node.netns, node.vethHost);
  for (const socket of shimSockets) rmSync(socket, { force: true });
}

/**
 * A lost node's machine replaced by a new one of the same name, as a cloud's node group replaces
 * a machine: what the lost one left is removed, and a fresh containerd (images imported again),
 * kubelet and kube-proxy register the node anew. Resolves once it is Ready.
 */
export async function replaceRealNode(o: RealNodesOptions, name: string): Promise<void> {
  const all = realNodeLayouts(o.instance, o.count);
  const node = all.find((n) => n.name === name);
  if (!node) throw new Error(`no real node ${name} in this instance`);
  const running = AGENTS.filter((agent) => runningAgent(o.instance, node, agent));
  if (running.length > 0) throw new Error(`${name} is not lost: its ${running.join(", ")} still run`);
  await removeNodeLeftovers(node);
  await unmountUnder(node.dir);
  rmSync(node.dir, { recursive: true, force: true });
  const started = Date.now();
  const agents = await startNode(o, node, all);
  await waitUntil(async () => (await readyNodes(o)).includes(name), {
    what: `${name} Ready again`,
    timeoutMs: NODE_READY_TIMEOUT_MS,
    intervalMs: 250,
    alive: () => agents.every((a) => isOurProcess(a)),
    logFile: logFileOf(node, "kubelet"),
  });
  o.log(`${name} replaced and Ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/**
 * The sockets of the node's containerd shims: in a directory shared by every containerd
 * (/run/containerd/s), each task's `address` file in the node's state names its own.
 */
function shimSocketsOf(node: RealNodeLayout): string[] {
  const tasks = join(node.dir, "containerd", "state", "io.containerd.runtime.v2.task");
  if (!existsSync(tasks)) return [];
  return readdirSync(tasks).flatMap((namespace) =>
    readdirSync(join(tasks, namespace)).flatMap((id) => {
      try {
        const address = readFileSync(join(tasks, namespace, id, "address"), "utf8").trim();
        return address.startsWith("unix://") ? [address.slice("unix://".length)] : [];
      } catch {
        return [];
      }
    }),
  );
}

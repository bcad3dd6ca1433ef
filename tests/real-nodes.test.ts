// End-to-end on real nodes: two nodes, each its own network namespace with containerd + runc,
// kubelet v1.34.4 and kube-proxy (iptables), pods on a CNI bridge, CoreDNS as the cluster DNS.
// Proves the nodes themselves (DNS, Services, pod networking across nodes, kubelet's API, images
// missing on a node), then the operator making a cluster on them whose members find each other
// through CoreDNS only, and finally that stopping the instance leaves nothing in the kernel, nor
// does a start that fails because a node cannot start, nor a crash once the next start is done.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { CustomObjectsApi, type V1Pod, type V1PodSpec } from "@kubernetes/client-node";
import t, { type Test } from "tap";
import { installCrds } from "../infra/crds.ts";
import { ensureAssets } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { readPidFile } from "../infra/local/daemons.ts";
import { clientsFor, isReady, readPod, waitFor, waitForPod } from "../infra/local/kube-wait.ts";
import { instanceLayout } from "../infra/local/layout.ts";
import { mountsUnder } from "../infra/local/nodes/host-state.ts";
import { CLUSTER_DNS_IP } from "../infra/local/nodes/layout.ts";
import { Kube } from "../shared/kube.ts";
import { createCluster, memberEndpoints, waitReady } from "./helpers/clusters.ts";
import { startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const NAME = "example";
const BUSYBOX = "docker.io/library/busybox:1.28.0-glibc";
const ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.35";
const SHIM_DIR = "/run/containerd/s";
const shimsBefore = new Set(existsSync(SHIM_DIR) ? readdirSync(SHIM_DIR) : []);
const assets = await ensureAssets({ only: ["kubernetes", "etcd", "node", "coredns"] });
const local = await startLocalCluster({ name: "e2e-real-nodes", realNodes: 2 });
let stopped = false;
t.teardown(async () => {
  if (!stopped) await local.stop();
});
const { kc, core, apps } = clientsFor(local.kubeconfigPath);
await installCrds(kc);
const custom = kc.makeApiClient(CustomObjectsApi);
const c = { kube: new Kube(kc), core, custom };

// A kubectl exec whose stream never ends would block the whole file (execFileSync) until tap's
// timeout; with a deadline it fails, says what it printed, and a wait can try again.
const KUBECTL_DEADLINE_MS = 30_000;

function kubectl(...args: string[]): string {
  try {
    return execFileSync(assets.kubectl, ["--kubeconfig", local.kubeconfigPath, ...args], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: KUBECTL_DEADLINE_MS,
    });
  } catch (error) {
    const { stdout, stderr, code } = error as { stdout?: string; stderr?: string; code?: string };
    const how = code === "ETIMEDOUT" ? `did not finish in ${KUBECTL_DEADLINE_MS / 1000} s` : "failed";
    throw new Error(
      `kubectl ${args.join(" ")} ${how}; stdout: ${stdout?.trim()}; stderr: ${stderr?.trim()}`,
      {
        cause: error,
      },
    );
  }
}

function pinned(name: string, node: string, spec: V1PodSpec): V1Pod {
  return {
    metadata: { name, namespace: NS, labels: { app: name } },
    spec: { ...spec, nodeName: node },
  };
}

async function runningPod(pod: V1Pod): Promise<V1Pod> {
  await core.createNamespacedPod({ namespace: NS, body: pod });
  const name = pod.metadata?.name ?? "";
  return waitForPod(core, NS, name, "Ready", isReady);
}

/** An HTTP GET from inside a pod with busybox's nc (its wget is not built for this). */
function getFrom(pod: string, host: string, port: number, path: string): string {
  return kubectl(
    "exec",
    pod,
    "--",
    "sh",
    "-c",
    `printf 'GET ${path} HTTP/1.0\\r\\n\\r\\n' | nc -w 3 ${host} ${port}`,
  );
}

/** The answer of getFrom once it names etcd's server; attempts that fail are printed, not hidden. */
function etcdVersionFrom(t: Test, what: string, pod: string, host: string, port: number): Promise<string> {
  return waitFor(what, async () => {
    try {
      const out = getFrom(pod, host, port, "/version");
      return out.includes("etcdserver") ? out : undefined;
    } catch (error) {
      t.comment(`${what}: ${error instanceof Error ? error.message : String(error)}`);
      throw error;
    }
  });
}

t.test("two real nodes: containerd, kubelet v1.34.4, Ready", async (t) => {
  const nodes = (await core.listNode()).items;
  t.same(nodes.map((n) => n.metadata?.name).sort(), ["node-1", "node-2"], "the nodes registered themselves");
  for (const node of nodes) {
    const name = node.metadata?.name;
    t.ok(
      node.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
      `${name} Ready`,
    );
    t.match(node.status?.nodeInfo?.containerRuntimeVersion, /^containerd:\/\/1\./, `${name} runs containerd`);
    t.equal(node.status?.nodeInfo?.kubeletVersion, "v1.34.4", `${name}'s kubelet is v1.34.4`);
    t.notOk(node.spec?.taints?.length, `${name} has no taint left`);
  }
  t.same(local.realNodes, ["node-1", "node-2"], "the instance's state names them");
});

t.test("CoreDNS serves the cluster DNS Service, one replica per node", async (t) => {
  const dns = await core.readNamespacedService({ namespace: "kube-system", name: "kube-dns" });
  t.equal(dns.spec?.clusterIP, CLUSTER_DNS_IP, "kube-dns has kubeadm's address");
  const deployment = await apps.readNamespacedDeployment({ namespace: "kube-system", name: "coredns" });
  t.equal(deployment.status?.readyReplicas, 2, "both replicas ready");
  const pods = (await core.listNamespacedPod({ namespace: "kube-system", labelSelector: "k8s-app=kube-dns" }))
    .items;
  t.same(pods.map((p) => p.spec?.nodeName).sort(), ["node-1", "node-2"], "spread over the nodes");
});

t.test("pods: DNS names and ClusterIPs through kube-proxy, across nodes, from the host", async (t) => {
  const server = await runningPod(
    pinned("server", "node-2", {
      containers: [
        {
          name: "etcd",
          image: ETCD_IMAGE,
          imagePullPolicy: "IfNotPresent",
          command: ["/usr/local/bin/etcd"],
          args: ["--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://server:2379"],
        },
      ],
    }),
  );
  await core.createNamespacedService({
    namespace: NS,
    body: {
      metadata: { name: "server" },
      spec: { selector: { app: "server" }, ports: [{ port: 80, targetPort: 2379 }] },
    },
  });
  const client = await runningPod(
    pinned("client", "node-1", {
      containers: [
        { name: "sh", image: BUSYBOX, imagePullPolicy: "IfNotPresent", command: ["sleep", "3600"] },
      ],
    }),
  );
  t.not(client.spec?.nodeName, server.spec?.nodeName, "client and server on different nodes");
  // A dotted name short of the cluster domain, as the operator's DNS check asks: found through the
  // pod's search path, as busybox 1.28's nslookup (libc's resolver) does.
  const lookup = kubectl("exec", "client", "--", "nslookup", "kubernetes.default.svc");
  t.match(
    lookup,
    /Address 1: 10\.96\.0\.1 kubernetes\.default\.svc\.cluster\.local/,
    "kubernetes.default.svc resolves to its ClusterIP through CoreDNS",
  );
  const resolv = kubectl("exec", "client", "--", "cat", "/etc/resolv.conf");
  t.match(
    resolv,
    new RegExp(`nameserver ${CLUSTER_DNS_IP.replaceAll(".", "\\.")}`),
    "pods use the cluster DNS",
  );
  const service = await core.readNamespacedService({ namespace: NS, name: "server" });
  const byIp = await etcdVersionFrom(
    t,
    "the Service's ClusterIP",
    "client",
    service.spec?.clusterIP ?? "",
    80,
  );
  t.match(
    byIp,
    /"etcdserver":"3\.5\.35"/,
    "ClusterIP port 80 reaches the pod on the other node (kube-proxy DNAT)",
  );
  t.match(
    await etcdVersionFrom(t, "the Service's DNS name", "client", "server.default.svc.cluster.local", 80),
    /etcdserver/,
    "and by DNS name",
  );
  t.match(
    await etcdVersionFrom(t, "the server pod's IP", "client", server.status?.podIP ?? "", 2379),
    /etcdserver/,
    "pod to pod across nodes",
  );
  const fromHost = await fetch(`http://${server.status?.podIP}:2379/version`, {
    signal: AbortSignal.timeout(10_000),
  });
  t.match(await fromHost.text(), /etcdserver/, "the host reaches pods by IP");
  t.match(kubectl("logs", "server"), /serving client traffic/, "kubectl logs goes through the kubelet");
  const hosts = kubectl("exec", "client", "--", "cat", "/etc/hosts");
  t.notMatch(hosts, /server/, "no /etc/hosts entry for other pods: names come from DNS only");
});

t.test("an image no one built gives ErrImagePull, not a hang", async (t) => {
  await core.createNamespacedPod({
    namespace: NS,
    body: pinned("missing-image", "node-1", {
      containers: [
        { name: "x", image: "docker.io/library/not-built-here:1.0", imagePullPolicy: "IfNotPresent" },
      ],
    }),
  });
  const reason = await waitFor(
    "the pod to report its image pull failure",
    async () => {
      const pod = await readPod(core, NS, "missing-image");
      const waiting = pod?.status?.containerStatuses?.[0]?.state?.waiting?.reason;
      return waiting === "ErrImagePull" || waiting === "ImagePullBackOff" ? waiting : undefined;
    },
    { timeoutMs: 90_000, intervalMs: 500 },
  );
  t.ok(["ErrImagePull", "ImagePullBackOff"].includes(reason), `waiting: ${reason}`);
});

t.test("the operator makes a 3-member cluster over both nodes; members find each other by DNS", async (t) => {
  const operator = startOperatorProcess(local, "all");
  t.teardown(() => operator.kill("SIGKILL"));
  await createCluster(c, NS, NAME, { size: 3, version: "3.5.35" });
  await waitReady(c, NS, NAME, 3, 180_000);
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${NAME}` })).items;
  t.same(
    [...new Set(pods.map((p) => p.spec?.nodeName))].sort(),
    ["node-1", "node-2"],
    "members on both nodes",
  );
  const statuses = await Promise.all(
    (await memberEndpoints(c, NS, NAME)).map(async (e) => (await fetch(`${e}/health`)).json()),
  );
  t.same(
    statuses.map((s) => (s as { health?: string }).health),
    ["true", "true", "true"],
    "every member healthy",
  );
});

/** What an instance of real nodes may leave behind once stopped: each check with its finding. */
function leftoversOf(dir: string, network: { netnsPrefix: string; bridge: string }, t: Test): void {
  // Zombies are left out: they have exited, and init reaps them (killed shims are init's children).
  const processes = execFileSync("ps", ["-eo", "stat=,args="], { encoding: "utf8" })
    .split("\n")
    .filter((line) => !line.trimStart().startsWith("Z"))
    .filter((line) => line.includes(dir) || /containerd-shim|\/pause$|coredns/.test(line));
  t.same(processes, [], "no process");
  t.same(mountsUnder(dir), [], "no mount");
  const netns = existsSync("/var/run/netns") ? readdirSync("/var/run/netns") : [];
  t.same(
    netns.filter((n) => n.startsWith(network.netnsPrefix)),
    [],
    "no network namespace",
  );
  const slot = network.netnsPrefix.replace(/^eop|-$/g, "");
  const cgroups = readdirSync("/sys/fs/cgroup").flatMap((h) =>
    existsSync(join("/sys/fs/cgroup", h, `eop${slot}-node1`)) ? [h] : [],
  );
  t.same(cgroups, [], "no cgroup");
  t.notMatch(execFileSync("ip", ["route"], { encoding: "utf8" }), new RegExp(network.bridge), "no route");
  t.notOk(existsSync(dir), "no files");
  const shims = existsSync(SHIM_DIR) ? readdirSync(SHIM_DIR) : [];
  t.same(
    shims.filter((s) => !shimsBefore.has(s)),
    [],
    "no containerd shim socket",
  );
}

t.test("stopping the instance leaves no process, mount, namespace, cgroup or route", async (t) => {
  const dir = local.dir;
  await local.stop();
  stopped = true;
  leftoversOf(dir, local.network, t);
});

t.test("a node that cannot start stops the start with what to read, and leaves nothing", async (t) => {
  // An image archive containerd cannot import, as a broken image build leaves one.
  const broken = join(mkdtempSync(join(tmpdir(), "eop-broken-image-")), "broken.oci.tar");
  writeFileSync(broken, "not an OCI archive");
  const name = "e2e-real-nodes-bad";
  const error = await startLocalCluster({ name, realNodes: 1, nodeImages: [broken] }).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(error instanceof Error, "the start fails");
  const messages: string[] = [];
  for (let e: unknown = error; e instanceof Error; e = e.cause) messages.push(e.message);
  t.match(messages.join("\n"), `node-1: importing ${broken} into containerd failed`, "names the archive");
  const layout = instanceLayout(name);
  leftoversOf(layout.dir, layout.network, t);
  rmSync(dirname(broken), { recursive: true, force: true });
});

/** Pids of live processes whose command line is exactly `cmdline`. */
function processesRunning(cmdline: string): number[] {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, "utf8").replace(/\0/g, " ").trim() === cmdline;
      } catch {
        return false;
      }
    })
    .map(Number);
}

t.test("a start after a crash of everything cleans up what the real nodes left", async (t) => {
  const name = "e2e-real-nodes-crash";
  const layout = instanceLayout(name);
  const crashed = await startLocalCluster({ name, realNodes: 1 });
  const { core: crashedCore } = clientsFor(crashed.kubeconfigPath);
  // A duration no other test uses, to find this pod's process on the host.
  const marker = "sleep 7777";
  await crashedCore.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "outlives-the-crash" },
      spec: {
        containers: [
          { name: "sh", image: BUSYBOX, imagePullPolicy: "IfNotPresent", command: marker.split(" ") },
        ],
      },
    },
  });
  await waitForPod(crashedCore, NS, "outlives-the-crash", "Ready", isReady);
  // Everything SIGKILLed at once, as when the machine's user kills the test run: the control plane,
  // containerd, kubelet and kube-proxy. The containers and their shims live on.
  for (const file of readdirSync(layout.dir).filter((f) => f.endsWith(".pid"))) {
    const record = readPidFile(join(layout.dir, file));
    if (record) process.kill(record.pid, "SIGKILL");
  }
  const orphans = processesRunning(marker);
  t.equal(orphans.length, 1, "the pod's process outlived the crash");
  const restarted = await startLocalCluster({ name, realNodes: 1 });
  t.same(
    orphans.filter((pid) => existsSync(`/proc/${pid}`)),
    [],
    "the next start killed it",
  );
  const { core } = clientsFor(restarted.kubeconfigPath);
  t.same((await core.listNamespacedPod({ namespace: NS })).items, [], "and starts empty");
  await restarted.stop();
  leftoversOf(layout.dir, layout.network, t);
});

// End-to-end tests of the EtcdCluster operator against the local control plane: real
// kube-apiserver, kube-controller-manager, Redis, etcd pods run by the process kubelet, and the
// operator's watcher and workers as separate processes.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { CustomObjectsApi, PolicyV1Api } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import { Redis } from "ioredis";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { ensureAssets } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, readPod, waitFor } from "../infra/local/kube-wait.ts";
import type { EtcdCluster } from "../shared/api/etcd-cluster.ts";
import { Kube } from "../shared/kube.ts";
import { floorKey } from "../shared/read-floor.ts";
import { etcdPidOf } from "./helpers/etcd-processes.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

const NS = "default";
const assets = await ensureAssets();
const cluster = await startLocalCluster({ name: "e2e-operator" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const _custom = kc.makeApiClient(CustomObjectsApi);
const kube = new Kube(kc);
const policy = kc.makeApiClient(PolicyV1Api);
await installCrds(kc);

const processes: OperatorProcess[] = [];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});
function start(role: string): OperatorProcess {
  const p = startOperatorProcess(cluster, role);
  processes.push(p);
  return p;
}
start("watcher");
start("scheduler");
const workers = [start("worker"), start("worker")];

function kubectl(...args: string[]): string {
  return execFileSync(assets.kubectl, ["--kubeconfig", cluster.kubeconfigPath, ...args], {
    encoding: "utf8",
  });
}

function apply(manifest: string): void {
  execFileSync(assets.kubectl, ["--kubeconfig", cluster.kubeconfigPath, "apply", "-f", "-"], {
    input: manifest,
    encoding: "utf8",
  });
}

async function getCluster(name: string): Promise<EtcdCluster | undefined> {
  return kube.getCluster(NS, name).catch(() => undefined);
}

function condition(c: EtcdCluster | undefined, type: string) {
  return c?.status?.conditions?.find((x) => x.type === type);
}

async function memberPodIps(name: string): Promise<string[]> {
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
  return pods.items
    .filter((p) => p.status?.podIP && !p.metadata?.deletionTimestamp)
    .map((p) => `http://${p.status?.podIP}:2379`);
}

/** Waits until the cluster is Available with exactly `size` healthy voting members and `size` pods. */
async function waitConverged(name: string, size: number, timeoutMs = 120_000): Promise<EtcdCluster> {
  return waitFor(
    `${name} to converge to ${size} healthy voting members`,
    async () => {
      const c = await getCluster(name);
      if (condition(c, "Available")?.status !== "True" || condition(c, "Progressing")?.status !== "False")
        return undefined;
      if (c?.status?.size !== size || c.status.readyMembers !== size) return undefined;
      const hosts = await memberPodIps(name);
      if (hosts.length !== size) return undefined;
      const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
      if (
        !pods.items.every((p) => p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"))
      ) {
        return undefined;
      }
      const client = new Etcd3({ hosts, dialTimeout: 2000 });
      try {
        const members = await client.cluster.memberList({ linearizable: true });
        const voters = members.members.filter((m) => !m.isLearner);
        return voters.length === size && members.members.length === size ? c : undefined;
      } finally {
        client.close();
      }
    },
    { timeoutMs, intervalMs: 500, describe: async () => JSON.stringify((await getCluster(name))?.status) },
  );
}

function clusterManifest(name: string, size: number, version = "3.7.3"): string {
  return `apiVersion: etcd.database.coreos.com/v1beta2
kind: EtcdCluster
metadata:
  name: ${name}
spec:
  size: ${size}
  version: "${version}"
`;
}

t.test("the seeds' example cluster becomes Available with three voting members", async (t) => {
  const example = readFileSync(
    new URL("../manifests/examples/example-etcd-cluster.yaml", import.meta.url),
    "utf8",
  );
  apply(example);
  const ready = await waitConverged("example-etcd-cluster", 3);
  t.equal(ready.status?.phase, "Running");
  t.equal(ready.status?.currentVersion, "3.7.3");
  t.equal(ready.status?.clientURL, "http://example-etcd-cluster-client.default.svc:2379");
  const budget = await policy.readNamespacedPodDisruptionBudget({
    namespace: NS,
    name: "example-etcd-cluster",
  });
  t.equal(budget.spec?.minAvailable, 2, "a PodDisruptionBudget keeps a majority of 3 available");
  const table = kubectl("get", "etcd");
  t.match(table, /NAME\s+SIZE\s+READY\s+VERSION\s+PHASE\s+AGE/);
  t.match(table, /example-etcd-cluster\s+3\s+3\s+3\.7\.3\s+Running/);
  // The read floor (shared/read-floor.ts) follows the operator's writes: at least the version read
  // above (every status write raised it), never a version the API server has not reached.
  const redis = new Redis(cluster.redisUrl ?? "");
  const floor = await redis.get(floorKey(`${NS}/example-etcd-cluster`));
  redis.disconnect();
  const now = await getCluster("example-etcd-cluster");
  t.match(floor, /^[1-9][0-9]*$/, "the cluster has a read floor");
  t.ok(
    BigInt(floor ?? "0") >= BigInt(ready.metadata?.resourceVersion ?? "0") &&
      BigInt(floor ?? "0") <= BigInt(now?.metadata?.resourceVersion ?? "0"),
    `floor ${floor} between the converged version ${ready.metadata?.resourceVersion} and the current ${now?.metadata?.resourceVersion}`,
  );
  const client = new Etcd3({ hosts: await memberPodIps("example-etcd-cluster") });
  await client.put("survives").value("everything");
  client.close();
  const events = await core.listNamespacedEvent({
    namespace: NS,
    fieldSelector: "involvedObject.name=example-etcd-cluster",
  });
  const reasons = events.items.map((e) => e.reason);
  t.ok(
    reasons.includes("ServicesCreated") && reasons.includes("SeedMemberCreated"),
    "an Event for the Services and one for the seed",
  );
});

t.test("scale 3 → 5 → 3 converges with every acknowledged write kept", async (t) => {
  const writer = startWriter(() => memberPodIps("example-etcd-cluster"), "w/example-etcd-cluster/");
  kubectl("scale", "etcd/example-etcd-cluster", "--replicas=5");
  await waitConverged("example-etcd-cluster", 5);
  const budget = await policy.readNamespacedPodDisruptionBudget({
    namespace: NS,
    name: "example-etcd-cluster",
  });
  t.equal(budget.spec?.minAvailable, 3, "the budget follows the size: a majority of 5");
  kubectl("scale", "etcd/example-etcd-cluster", "--replicas=3");
  await waitConverged("example-etcd-cluster", 3);
  const { acknowledged } = await writer.stop();
  const events = await core.listNamespacedEvent({
    namespace: NS,
    fieldSelector: "involvedObject.name=example-etcd-cluster",
  });
  const reasons = new Set(events.items.map((e) => e.reason));
  t.ok(
    reasons.has("MemberAdded") && reasons.has("MemberPromoted") && reasons.has("MemberRemoved"),
    "Events for each member step",
  );
  t.ok(acknowledged.length > 10, `writes went on during scaling (${acknowledged.length})`);
  t.same(
    await missingWrites(await memberPodIps("example-etcd-cluster"), acknowledged),
    [],
    "every acknowledged write is present",
  );
});

t.test("a deleted member pod is replaced and the cluster returns to full size", async (t) => {
  const pods = await core.listNamespacedPod({
    namespace: NS,
    labelSelector: "etcd_cluster=example-etcd-cluster",
  });
  const victim = pods.items[0]?.metadata?.name ?? "";
  await core.deleteNamespacedPod({ namespace: NS, name: victim });
  await waitFor("the victim to be replaced", async () =>
    (await readPod(core, NS, victim)) ? undefined : true,
  );
  const after = await waitConverged("example-etcd-cluster", 3);
  t.notOk(after.status?.members?.ready?.includes(victim), "the lost member was replaced by a new one");
  const client = new Etcd3({ hosts: await memberPodIps("example-etcd-cluster") });
  t.equal(await client.get("survives").string(), "everything", "data survives");
  client.close();
});

t.test("an etcd process killed in its pod is restarted in place", async (t) => {
  const pods = await core.listNamespacedPod({
    namespace: NS,
    labelSelector: "etcd_cluster=example-etcd-cluster",
  });
  const target = pods.items[0];
  const ip = target?.status?.podIP ?? "";
  const pid = etcdPidOf(target?.metadata?.name ?? "");
  t.ok(pid, "found the member's etcd process");
  process.kill(pid ?? 0, "SIGKILL");
  await waitFor(
    "the pod to restart its container and be Ready again",
    async () => {
      const pod = await readPod(core, NS, target?.metadata?.name ?? "");
      const status = pod?.status?.containerStatuses?.[0];
      return (status?.restartCount ?? 0) >= 1 && status?.ready ? true : undefined;
    },
    { timeoutMs: 60_000 },
  );
  await waitConverged("example-etcd-cluster", 3);
  const client = new Etcd3({ hosts: [`http://${ip}:2379`] });
  t.equal(await client.get("survives").string(), "everything", "the restarted member still has the data");
  client.close();
});

t.test("scale 1 → 3 from a new cluster", async (t) => {
  apply(clusterManifest("small", 1));
  await waitConverged("small", 1);
  kubectl("scale", "etcd/small", "--replicas=3");
  await waitConverged("small", 3);
  t.pass("converged");
});

t.test(
  "workers killed with SIGKILL mid-step, two at a time, never leave an extra or missing member",
  async (t) => {
    const writer = startWriter(() => memberPodIps("small"), "w/small/");
    kubectl("scale", "etcd/small", "--replicas=5");
    // Kill a worker every 700 ms while the cluster changes, always keeping one alive.
    let kills = 0;
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 700));
      const victim = workers.shift();
      if (!victim) break;
      await victim.kill("SIGKILL");
      kills++;
      workers.push(start("worker"));
    }
    await waitConverged("small", 5, 180_000);
    kubectl("scale", "etcd/small", "--replicas=3");
    await waitConverged("small", 3, 180_000);
    const { acknowledged } = await writer.stop();
    t.ok(kills >= 10, `killed ${kills} workers`);
    t.same(
      await missingWrites(await memberPodIps("small"), acknowledged),
      [],
      "every acknowledged write is present",
    );
  },
);

t.test("bad input is reported and a running cluster is left untouched", async (t) => {
  t.throws(
    () => apply(clusterManifest("zero", 0)),
    /size|spec\.size/,
    "size 0 is rejected by the API server",
  );
  apply(clusterManifest("ancient", 3, "3.2.13"));
  const reported = await waitFor("ancient to report an invalid spec", async () => {
    const c = await getCluster("ancient");
    return condition(c, "Degraded")?.reason === "InvalidSpec" ? c : undefined;
  });
  t.match(condition(reported, "Degraded")?.message ?? "", /3\.2\.13/);
  t.equal((await memberPodIps("ancient")).length, 0, "nothing was created for it");

  // Live pods only: the pod of a member the scale-down before removed may still be terminating
  // (converged counts live pods) and go meanwhile, which is no change to the running cluster.
  const livePods = async () =>
    (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=small" })).items
      .filter((p) => !p.metadata?.deletionTimestamp)
      .map((p) => p.metadata?.name)
      .sort();
  const before = await livePods();
  kubectl("patch", "etcd/small", "--type=merge", "-p", '{"spec":{"version":"3.2.13"}}');
  await waitFor("small to report the invalid version", async () =>
    condition(await getCluster("small"), "Degraded")?.reason === "InvalidSpec" ? true : undefined,
  );
  await new Promise((r) => setTimeout(r, 3000));
  t.same(await livePods(), before, "the running cluster's pods are untouched");
  const client = new Etcd3({ hosts: await memberPodIps("small") });
  await client.put("still").value("serving");
  client.close();
  kubectl("patch", "etcd/small", "--type=merge", "-p", '{"spec":{"version":"3.7.3"}}');
  await waitConverged("small", 3);
});

t.test("deleting an EtcdCluster removes its pods and Services", async (t) => {
  kubectl("delete", "etcd", "small", "--wait=true");
  await waitFor("small's pods and Services to be gone", async () => {
    const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=small" });
    const services = await core.listNamespacedService({ namespace: NS, labelSelector: "etcd_cluster=small" });
    return pods.items.length === 0 && services.items.length === 0 ? true : undefined;
  });
  t.pass("garbage collected");
});

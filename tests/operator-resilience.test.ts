// End-to-end: the operator's behaviour around the cluster rather than inside it — `paused`,
// namespaced versus cluster-wide scope, an apiserver restart under the watcher, and Redis
// losing all queue state. The resync interval is set long (60 s) so that convergence within the
// bounds below proves events, not the safety net, drove it.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import { Redis } from "ioredis";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import { Kube, MERGE_PATCH } from "../shared/kube.ts";
import { etcdPidOf } from "./helpers/etcd-processes.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const cluster = await startLocalCluster({ name: "e2e-resilience" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const kube = new Kube(kc);
await installCrds(kc);
await core.createNamespace({ body: { metadata: { name: "other" } } });

const processes: OperatorProcess[] = [];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});
const SLOW_RESYNC = { RECONCILE_INTERVAL_MS: "60000", MEMBER_UNHEALTHY_GRACE_MS: "10000" };
processes.push(startOperatorProcess(cluster, "all", SLOW_RESYNC));

async function createCluster(
  namespace: string,
  name: string,
  spec: object,
  annotations?: Record<string, string>,
) {
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: PLURAL,
    body: { apiVersion: `${GROUP}/${VERSION}`, kind: "EtcdCluster", metadata: { name, annotations }, spec },
  });
}

async function getCluster(namespace: string, name: string): Promise<EtcdCluster> {
  const found = await kube.getCluster(namespace, name);
  if (!found) throw new Error(`EtcdCluster ${namespace}/${name} not found`);
  return found;
}

// A merge patch, not a read-modify-replace: the operator writes status concurrently, and a replace
// carrying a stale resourceVersion fails with 409 Conflict.
async function patchSpec(namespace: string, name: string, spec: object): Promise<void> {
  await custom.patchNamespacedCustomObject(
    { group: GROUP, version: VERSION, namespace, plural: PLURAL, name, body: { spec } },
    MERGE_PATCH,
  );
}

async function readyPods(namespace: string, name: string): Promise<number> {
  const pods = await core.listNamespacedPod({ namespace, labelSelector: `etcd_cluster=${name}` });
  return pods.items.filter(
    (p) =>
      !p.metadata?.deletionTimestamp &&
      p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
  ).length;
}

async function waitReady(namespace: string, name: string, size: number, timeoutMs = 60_000): Promise<void> {
  await waitFor(
    `${namespace}/${name} to have ${size} ready members`,
    async () => {
      const c = await getCluster(namespace, name);
      const steady = c.status?.conditions?.find((x) => x.type === "Progressing")?.status === "False";
      return steady && c.status?.readyMembers === size && (await readyPods(namespace, name)) === size
        ? true
        : undefined;
    },
    {
      timeoutMs,
      intervalMs: 300,
      describe: async () => JSON.stringify((await getCluster(namespace, name)).status),
    },
  );
}

t.test("paused: true stops every change until it is lifted", async (t) => {
  await createCluster("default", "calm", { size: 1 });
  await waitReady("default", "calm", 1);
  await patchSpec("default", "calm", { paused: true, size: 3 });
  await waitFor("status to show the pause", async () =>
    (await getCluster("default", "calm")).status?.controlPaused ? true : undefined,
  );
  await new Promise((r) => setTimeout(r, 4000));
  t.equal(await readyPods("default", "calm"), 1, "no member was added while paused");
  const paused = await getCluster("default", "calm");
  t.equal(paused.status?.conditions?.find((c) => c.type === "Progressing")?.reason, "Paused");
  await patchSpec("default", "calm", { paused: false });
  await waitReady("default", "calm", 3);
  t.equal((await getCluster("default", "calm")).status?.controlPaused, false, "unpaused");
});

t.test(
  "a namespaced operator ignores other namespaces; a cluster-wide one takes only annotated clusters",
  async (t) => {
    await createCluster("other", "wide", { size: 1 }, { "etcd.database.coreos.com/scope": "clusterwide" });
    await createCluster("other", "plain", { size: 1 });
    await new Promise((r) => setTimeout(r, 4000));
    t.equal(await readyPods("other", "wide"), 0, "the namespaced operator left the other namespace alone");
    processes.push(startOperatorProcess(cluster, "all", { ...SLOW_RESYNC, CLUSTER_WIDE: "true" }));
    await waitReady("other", "wide", 1);
    t.pass("the cluster-wide operator runs the annotated cluster");
    await new Promise((r) => setTimeout(r, 3000));
    t.equal(await readyPods("other", "plain"), 0, "and leaves the unannotated one alone");
    t.notOk((await getCluster("other", "plain")).status?.phase, "nobody wrote its status");
  },
);

t.test("the watcher survives a kube-apiserver restart", async (t) => {
  await cluster.restartApiserver(3_000);
  await waitFor("the apiserver to answer again", async () =>
    (await getCluster("default", "calm")) ? true : undefined,
  );
  // A change after the restart must arrive through the re-established watch (resync is 60 s away).
  const started = Date.now();
  await patchSpec("default", "calm", { size: 1 });
  await waitReady("default", "calm", 1, 40_000);
  t.ok(Date.now() - started < 40_000, `scaled down through the restored watch in ${Date.now() - started} ms`);
});

t.test("after Redis loses every key, the operator rebuilds its work from the cluster state", async (t) => {
  const redis = new Redis(cluster.redisUrl ?? "", { maxRetriesPerRequest: null });
  t.teardown(() => redis.disconnect());
  // No operator runs while the spec changes and Redis is wiped: no event will ever announce it.
  for (const p of processes.splice(0)) await p.kill("SIGTERM");
  await patchSpec("default", "calm", { size: 3 });
  await redis.flushall();
  // Only a scheduler and a worker come back (no watcher): the scheduler finds the queue state
  // gone, reinstalls its schedule and enqueues every cluster; the resync itself is 60 s away.
  processes.push(startOperatorProcess(cluster, "scheduler", SLOW_RESYNC));
  processes.push(startOperatorProcess(cluster, "worker", SLOW_RESYNC));
  const started = Date.now();
  await waitReady("default", "calm", 3, 45_000);
  t.ok(
    Date.now() - started < 45_000,
    `converged ${Date.now() - started} ms after the restart, well before a resync`,
  );
  t.ok(await redis.exists("eop:schedules-installed"), "the schedules were reinstalled");
});

t.test("a member whose data is corrupted crash-loops, and is replaced after the grace period", async (t) => {
  const pods = await core.listNamespacedPod({ namespace: "default", labelSelector: "etcd_cluster=calm" });
  const victim = pods.items[0];
  const name = victim?.metadata?.name ?? "";
  const podDir = join(cluster.dir, "kubelet", "pods", `default_${name}_${victim?.metadata?.uid}`);
  const client = new Etcd3({ hosts: pods.items.map((p) => `http://${p.status?.podIP}:2379`) });
  await client.put("kept").value("yes");
  client.close();
  // Corrupt the member's data, then kill its process: etcd cannot open its database again and
  // crash-loops. (An emptied data dir is not deterministic: etcd sometimes rejoins from the
  // leader's snapshot, sometimes panics on the leader's commit index.)
  writeFileSync(join(podDir, "volumes", "etcd-data", "data", "member", "snap", "db"), randomBytes(4096));
  const pid = etcdPidOf(name);
  t.ok(pid, "found the member's etcd");
  process.kill(pid ?? 0, "SIGKILL");
  await waitFor(
    `${name} to be replaced`,
    async () => {
      const current = await core.listNamespacedPod({
        namespace: "default",
        labelSelector: "etcd_cluster=calm",
      });
      return current.items.some((p) => p.metadata?.name === name) ? undefined : true;
    },
    { timeoutMs: 90_000 },
  );
  await waitReady("default", "calm", 3, 90_000);
  const events = await core.listNamespacedEvent({
    namespace: "default",
    fieldSelector: "involvedObject.name=calm,reason=MemberReplaced",
  });
  t.ok(
    events.items.some((e) => e.message?.includes(name)),
    "a MemberReplaced Event names the lost member",
  );
  const after = await core.listNamespacedPod({ namespace: "default", labelSelector: "etcd_cluster=calm" });
  const reader = new Etcd3({ hosts: after.items.map((p) => `http://${p.status?.podIP}:2379`) });
  t.equal(await reader.get("kept").string(), "yes", "the cluster's data is intact");
  reader.close();
});

// End-to-end: the operator's behaviour around the cluster rather than inside it — `paused`,
// namespaced versus cluster-wide scope, an apiserver restart under the watcher, and Redis
// losing all queue state. The resync interval is set long (60 s) so that convergence within the
// bounds below proves events, not the safety net, drove it.
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import { Redis } from "ioredis";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { Kube } from "../shared/kube.ts";
import {
  type ClusterClients,
  createCluster,
  getCluster,
  patchSpec,
  readyPods,
  waitReady,
} from "./helpers/clusters.ts";
import { etcdPidOf } from "./helpers/etcd-processes.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const cluster = await startLocalCluster({ name: "e2e-resilience" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const kube = new Kube(kc);
const c: ClusterClients = { kube, core, custom };
await installCrds(kc);
await core.createNamespace({ body: { metadata: { name: "other" } } });

const processes: OperatorProcess[] = [];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});
const SLOW_RESYNC = { RECONCILE_INTERVAL_MS: "60000", MEMBER_UNHEALTHY_GRACE_MS: "10000" };
processes.push(startOperatorProcess(cluster, "all", SLOW_RESYNC));

t.test("paused: true stops every change until it is lifted", async (t) => {
  await createCluster(c, "default", "calm", { size: 1 });
  await waitReady(c, "default", "calm", 1);
  await patchSpec(c, "default", "calm", { paused: true, size: 3 });
  await waitFor("status to show the pause", async () =>
    (await getCluster(c, "default", "calm")).status?.controlPaused ? true : undefined,
  );
  await new Promise((r) => setTimeout(r, 4000));
  t.equal(await readyPods(c, "default", "calm"), 1, "no member was added while paused");
  const paused = await getCluster(c, "default", "calm");
  t.equal(paused.status?.conditions?.find((c) => c.type === "Progressing")?.reason, "Paused");
  await patchSpec(c, "default", "calm", { paused: false });
  await waitReady(c, "default", "calm", 3);
  t.equal((await getCluster(c, "default", "calm")).status?.controlPaused, false, "unpaused");
});

t.test(
  "a namespaced operator ignores other namespaces; a cluster-wide one takes only annotated clusters",
  async (t) => {
    await createCluster(c, "other", "wide", { size: 1 }, { "etcd.database.coreos.com/scope": "clusterwide" });
    await createCluster(c, "other", "plain", { size: 1 });
    await new Promise((r) => setTimeout(r, 4000));
    t.equal(await readyPods(c, "other", "wide"), 0, "the namespaced operator left the other namespace alone");
    processes.push(startOperatorProcess(cluster, "all", { ...SLOW_RESYNC, CLUSTER_WIDE: "true" }));
    await waitReady(c, "other", "wide", 1);
    t.pass("the cluster-wide operator runs the annotated cluster");
    await new Promise((r) => setTimeout(r, 3000));
    t.equal(await readyPods(c, "other", "plain"), 0, "and leaves the unannotated one alone");
    t.notOk((await getCluster(c, "other", "plain")).status?.phase, "nobody wrote its status");
  },
);

t.test("the watcher survives a kube-apiserver restart", async (t) => {
  await cluster.restartApiserver(3_000);
  await waitFor("the apiserver to answer again", async () =>
    (await getCluster(c, "default", "calm")) ? true : undefined,
  );
  // A change after the restart must arrive through the re-established watch (resync is 60 s away).
  const started = Date.now();
  await patchSpec(c, "default", "calm", { size: 1 });
  await waitReady(c, "default", "calm", 1, 40_000);
  t.ok(Date.now() - started < 40_000, `scaled down through the restored watch in ${Date.now() - started} ms`);
});

t.test("after Redis loses every key, the operator rebuilds its work from the cluster state", async (t) => {
  const redis = new Redis(cluster.redisUrl ?? "", { maxRetriesPerRequest: null });
  t.teardown(() => redis.disconnect());
  // No operator runs while the spec changes and Redis is wiped: no event will ever announce it.
  for (const p of processes.splice(0)) await p.kill("SIGTERM");
  await patchSpec(c, "default", "calm", { size: 3 });
  await redis.flushall();
  // Only a scheduler and a worker come back (no watcher): the scheduler finds the queue state
  // gone, reinstalls its schedule and enqueues every cluster; the resync itself is 60 s away.
  processes.push(startOperatorProcess(cluster, "scheduler", SLOW_RESYNC));
  processes.push(startOperatorProcess(cluster, "worker", SLOW_RESYNC));
  const started = Date.now();
  await waitReady(c, "default", "calm", 3, 45_000);
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
  await waitReady(c, "default", "calm", 3, 90_000);
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

t.test("a SIGTERM while Redis is down ends a worker at once, not at the kubelet's SIGKILL", async (t) => {
  const worker = startOperatorProcess(cluster, "worker", SLOW_RESYNC);
  processes.push(worker);
  await waitFor(
    "the worker to start",
    async () => (readFileSync(worker.logFile, "utf8").includes("etcd operator running") ? true : undefined),
    { timeoutMs: 30_000 },
  );
  // Redis goes away (as when an uninstall deletes it beside the worker) and stays away for 20 s.
  const redisBack = cluster.restartRedis(20_000).then(() => "Redis back" as const);
  await waitFor(
    "the worker to see Redis gone",
    async () =>
      readFileSync(worker.logFile, "utf8").includes("Redis connection lost; steps wait until it is back")
        ? true
        : undefined,
    { timeoutMs: 10_000, intervalMs: 100 },
  );
  const exited = new Promise<string>((resolve) =>
    worker.child.once("exit", (code, signal) => resolve(`exited (${code ?? signal})`)),
  );
  worker.child.kill("SIGTERM");
  t.equal(await Promise.race([exited, redisBack]), "exited (0)", "the worker exited while Redis was down");
  await redisBack;
});

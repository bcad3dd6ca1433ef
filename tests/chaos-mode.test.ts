// End-to-end: the operator's own chaos mode (CHAOS_LEVEL, for users' test environments). With
// level 10 every look kills: a cluster annotated etcd.database.coreos.com/chaos=true loses a random
// member pod again and again, never more than one at a time, heals each time with every
// acknowledged write kept, and each kill has a ChaosKilledMember Event and counts in the metric; a
// cluster without the annotation beside it is never touched (same pods throughout).
import { createServer } from "node:net";
import { CustomObjectsApi } from "@kubernetes/client-node";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { CHAOS_ANNOTATION } from "../shared/api/etcd-cluster.ts";
import { Kube } from "../shared/kube.ts";
import { eventsOf } from "./helpers/backups.ts";
import { endpointsOf, livePods, waitConverged } from "./helpers/chaos.ts";
import { type ClusterClients, createCluster, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

const NS = "default";
const KILLS = 3;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

const local = await startLocalCluster({ name: "e2e-chaosmode" });
t.teardown(() => local.stop());
const { kc, core } = clientsFor(local.kubeconfigPath);
const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);

const metricsPort = await freePort();
const chaosEnv = { CHAOS_LEVEL: "10", CHAOS_INTERVAL_MS: "2000" };
const processes: OperatorProcess[] = [
  startOperatorProcess(local, "watcher"),
  startOperatorProcess(local, "worker"),
  startOperatorProcess(local, "scheduler", {
    ...chaosEnv,
    METRICS_PORT: String(metricsPort),
    METRICS_REQUIRE_AUTH: "false",
  }),
];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

const podUids = async (name: string) =>
  (await livePods({ c, namespace: NS, name })).map((p) => p.metadata?.uid ?? "").sort();

t.test("chaos mode kills members of the opted-in cluster only, one at a time, and it heals", async (t) => {
  await createCluster(c, NS, "calm", { size: 3 });
  await waitReady(c, NS, "calm", 3);
  const calmPods = await podUids("calm");
  await createCluster(c, NS, "monkey", { size: 3 }, { [CHAOS_ANNOTATION]: "true" });
  const monkey = { c, namespace: NS, name: "monkey", size: 3 };
  await waitReady(c, NS, "monkey", 3);
  const writer = startWriter(() => endpointsOf(monkey), "monkey/");

  // Watch the opted-in cluster while chaos runs: how many of its member pods are up and Ready.
  let fewestReady = 3;
  let watching = true;
  const watched = (async () => {
    while (watching) {
      const pods = await livePods(monkey).catch(() => undefined);
      if (pods) {
        const ready = pods.filter((p) =>
          p.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
        ).length;
        fewestReady = Math.min(fewestReady, ready);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  })();

  const convergeTimes: number[] = [];
  for (let kill = 1; kill <= KILLS; kill++) {
    const before = Date.now();
    await waitFor(
      `chaos kill ${kill}`,
      async () =>
        (await eventsOf(c, NS, "EtcdCluster", "monkey")).filter((e) => e.reason === "ChaosKilledMember")
          .length >= kill
          ? true
          : undefined,
      { timeoutMs: 120_000, intervalMs: 250 },
    );
    convergeTimes.push(await waitConverged(monkey, before, 120_000));
  }
  watching = false;
  await watched;
  const { acknowledged } = await writer.stop();

  const events = (await eventsOf(c, NS, "EtcdCluster", "monkey")).filter(
    (e) => e.reason === "ChaosKilledMember",
  );
  t.ok(events.length >= KILLS, `${events.length} ChaosKilledMember Events`);
  t.match(events[0]?.message, /chaos mode \(level 10\) deleted member pod monkey-\S+/, "naming the pod");
  t.comment(
    `waited ${convergeTimes.join(", ")} ms for it to be whole again after each kill event (a kill can land while the previous wait is still polling)`,
  );
  t.ok(fewestReady >= 2, `never more than one member down (fewest Ready: ${fewestReady})`);
  t.ok(acknowledged.length > 20, `${acknowledged.length} writes acknowledged meanwhile`);
  t.same(
    (await missingWrites(await endpointsOf(monkey), acknowledged)).map((w) => w.key),
    [],
    "every acknowledged write is there",
  );

  t.same(await podUids("calm"), calmPods, "the cluster without the annotation kept its pods");
  t.notOk(
    (await eventsOf(c, NS, "EtcdCluster", "calm")).some((e) => e.reason === "ChaosKilledMember"),
    "and has no ChaosKilledMember Event",
  );

  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const counted = /etcd_operator_chaos_kills_total\{namespace="default",cluster="monkey"\} (\d+)/.exec(
    metrics,
  );
  t.ok(Number(counted?.[1] ?? 0) >= KILLS, `the metric counts the kills (${counted?.[0]})`);
  t.notMatch(metrics, /etcd_operator_chaos_kills_total\{[^}]*cluster="calm"/, "and none for calm");
});

t.test("without CHAOS_LEVEL the annotation does nothing", async (t) => {
  // Restart the scheduler at the default level: no kill may follow.
  const scheduler = processes.pop();
  await scheduler?.kill("SIGTERM");
  processes.push(startOperatorProcess(local, "scheduler"));
  const monkey = { c, namespace: NS, name: "monkey", size: 3 };
  await waitConverged(monkey, Date.now(), 120_000);
  const kills = async () =>
    (await eventsOf(c, NS, "EtcdCluster", "monkey")).filter((e) => e.reason === "ChaosKilledMember").length;
  const before = await kills();
  const pods = await podUids("monkey");
  await new Promise((r) => setTimeout(r, 8_000));
  t.equal(await kills(), before, "no new ChaosKilledMember Event");
  t.same(await podUids("monkey"), pods, "the same member pods");
});

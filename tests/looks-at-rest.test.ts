// A cluster at rest, on the local control plane with a real etcd cluster and Redis: between full
// looks the operator asks one member for its Status and reads nothing from kube-apiserver; a change
// inside etcd (a new leader) makes the next look a full one; an owned Service or budget deleted is
// put back at once through its watch event, long before a full look would have seen it.
import { CoreV1Api, CustomObjectsApi, PolicyV1Api } from "@kubernetes/client-node";
import t from "tap";
import { apiRequestCounts, countsSince } from "../bench/api-requests.ts";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { startOperator } from "../infra/operator.ts";
import { loadConfig } from "../shared/config.ts";
import { endpointStatuses, leaderId, moveLeader } from "../shared/etcd-members.ts";
import { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";
import { clientServiceName } from "../shared/member-pods.ts";
import { operatorMetrics } from "../shared/metrics.ts";
import { type ClusterClients, createCluster, memberEndpoints, waitReady } from "./helpers/clusters.ts";

const NS = "default";
const NAME = "calm";
const cluster = await startLocalCluster({ name: "e2e-looks" });
t.teardown(() => cluster.stop());
const { kc } = clientsFor(cluster.kubeconfigPath);
const core = kc.makeApiClient(CoreV1Api);
const policy = kc.makeApiClient(PolicyV1Api);
const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
// A look every second; a full one only every 10 minutes, so within this test every full look after
// the first comes from an event or from what a quick look found.
const operator = await startOperator({
  kc,
  config: loadConfig({
    REDIS_URL: cluster.redisUrl,
    MY_POD_NAMESPACE: NS,
    RECONCILE_INTERVAL_MS: "1000",
    FULL_LOOK_INTERVAL_MS: "600000",
  }),
  log: silentLogger(),
});
t.teardown(() => operator.stop());
await operator.ready;

async function quickLooks(): Promise<{ same: number; changed: number }> {
  const values = (await operatorMetrics().quickLooks.get()).values;
  const count = (result: string) => values.find((v) => v.labels.result === result)?.value ?? 0;
  return { same: count("same"), changed: count("changed") };
}

await createCluster(c, NS, NAME, { size: 3 });
await waitReady(c, NS, NAME, 3);

t.test("at rest, looks ask one member and nothing of kube-apiserver", async (t) => {
  const start = await quickLooks();
  await waitFor(
    "three quick looks",
    async () => ((await quickLooks()).same >= start.same + 3 ? true : undefined),
    {
      timeoutMs: 20_000,
    },
  );
  const before = await apiRequestCounts(kc);
  const looksBefore = await quickLooks();
  await new Promise((resolve) => setTimeout(resolve, 6_000));
  const requests = countsSince(before, await apiRequestCounts(kc));
  const looks = await quickLooks();
  t.ok(looks.same - looksBefore.same >= 3, `${looks.same - looksBefore.same} quick looks in 6 s`);
  t.equal(looks.changed, looksBefore.changed, "none of them found a change");
  t.equal(requests["GET etcdclusters"] ?? 0, 0, "no read of the EtcdCluster");
  t.equal(requests["LIST pods"] ?? 0, 0, "no list of its pods");
  t.equal(requests["GET services"] ?? 0, 0, "no read of its Services");
  t.equal(requests["GET poddisruptionbudgets"] ?? 0, 0, "no read of its budget");
  t.equal(requests["PATCH etcdclusters/status"] ?? 0, 0, "no status write");
});

t.test("a new leader makes the next look a full one", async (t) => {
  const endpoints = await memberEndpoints(c, NS, NAME);
  const statuses = await endpointStatuses(endpoints);
  const leader = leaderId(statuses);
  const target = statuses.find((s) => s.ok && s.memberId !== leader)?.memberId;
  if (!target) throw new Error("no follower to hand leadership to");
  const before = await quickLooks();
  await moveLeader(endpoints, target);
  await waitFor("a quick look to find the change", async () =>
    (await quickLooks()).changed > before.changed ? true : undefined,
  );
  t.pass("the quick look after the move found the change");
  // The full look that followed left a record with the new leader: looks are quick and alike again.
  const after = await quickLooks();
  await waitFor(
    "quick looks alike again",
    async () => ((await quickLooks()).same >= after.same + 2 ? true : undefined),
    {
      timeoutMs: 15_000,
    },
  );
  t.equal((await quickLooks()).changed, after.changed, "the new leader is in the record now");
});

t.test("an owned Service or budget deleted is put back at once", async (t) => {
  const service = clientServiceName(NAME);
  const deleted = Date.now();
  await core.deleteNamespacedService({ namespace: NS, name: service });
  await waitFor(
    `${service} put back`,
    async () => ((await c.kube.serviceExists(NS, service)) ? true : undefined),
    { timeoutMs: 15_000, intervalMs: 100 },
  );
  t.ok(
    Date.now() - deleted < 15_000,
    `the client Service was back ${Date.now() - deleted} ms after its deletion`,
  );

  const budgetDeleted = Date.now();
  await policy.deleteNamespacedPodDisruptionBudget({ namespace: NS, name: NAME });
  await waitFor(
    "the budget put back",
    async () => ((await c.kube.getPodDisruptionBudget(NS, NAME)) ? true : undefined),
    { timeoutMs: 15_000, intervalMs: 100 },
  );
  t.ok(
    Date.now() - budgetDeleted < 15_000,
    `the budget was back ${Date.now() - budgetDeleted} ms after its deletion`,
  );
});

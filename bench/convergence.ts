// Benchmark: how fast the operator converges, against a reference measured in the same run.
//   node bench/convergence.ts [--runs N] [--real-nodes N] [--save]
// With --real-nodes, the pods run on N containerd/kubelet nodes (CNI, kube-proxy, CoreDNS) instead of
// the process kubelet; the operator still runs in this process. With --save, the figures also go to
// bench/results/convergence[-real-nodes].json (see bench/render.ts).
// Scenarios (one JSON object each on stdout):
//   create: apply a size-3 EtcdCluster → Available with 3 voting members.
//           reference: three etcd pods bootstrapped statically (--initial-cluster) → all Ready.
//   heal:   delete one member pod of a healthy size-3 cluster → 3 healthy voting members again,
//           once with a follower's pod and once with the leader's (etcd must elect a new leader
//           before any member can be removed or added, so the two are reported apart).
//           reference: the same repair by hand, on a member in the same role → 3 healthy voters.
// Runs against the local control plane; never part of the default tests.
import { parseArgs } from "node:util";
import { CustomObjectsApi, type V1Pod } from "@kubernetes/client-node";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, isReady, waitFor } from "../infra/local/kube-wait.ts";
import { startOperator } from "../infra/operator.ts";
import {
  DEFAULT_REPOSITORY,
  type EtcdCluster,
  GROUP,
  type NormalizedSpec,
  PLURAL,
  VERSION,
} from "../shared/api/etcd-cluster.ts";
import { normalizedMaintenance } from "../shared/api/validate-etcd-cluster.ts";
import { loadConfig } from "../shared/config.ts";
import {
  addLearner,
  endpointStatuses,
  leaderId,
  listMembers,
  promoteLearner,
  removeMember,
} from "../shared/etcd-members.ts";
import { DEFAULT_ETCD_VERSION } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";
import { memberPod, newMemberName, peerService, peerURL } from "../shared/member-pods.ts";
import { saveResults } from "./results.ts";
import { keepLogs, load, ratio, summary } from "./stats.ts";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    "real-nodes": { type: "string" },
    save: { type: "boolean", default: false },
  },
});
const runs = Number(values.runs);
const realNodes = values["real-nodes"] === undefined ? undefined : Number(values["real-nodes"]);
const nodes = realNodes ? `${realNodes} real nodes` : "process kubelet";
const NS = "default";
const cluster = await startLocalCluster({ name: "bench", log: () => {}, realNodes });
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const kube = new Kube(kc);
await installCrds(kc);
const config = loadConfig({
  REDIS_URL: cluster.redisUrl,
  MY_POD_NAMESPACE: NS,
  RECONCILE_INTERVAL_MS: "8000",
});
const operator = await startOperator({ kc, config, log: silentLogger() });
await operator.ready;

async function getCluster(name: string): Promise<EtcdCluster> {
  const found = await kube.getCluster(NS, name);
  if (!found) throw new Error(`EtcdCluster ${NS}/${name} not found`);
  return found;
}

async function podEndpoints(selector: string): Promise<string[]> {
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: selector });
  return pods.items
    .filter((p) => p.status?.podIP && !p.metadata?.deletionTimestamp)
    .map((p) => `http://${p.status?.podIP}:2379`);
}

/** True once `size` voting members answer and every one is healthy. */
async function healthyVoters(selector: string, size: number): Promise<true | undefined> {
  const endpoints = await podEndpoints(selector);
  if (endpoints.length !== size) return undefined;
  const members = await listMembers(endpoints, { timeoutMs: 1000 });
  if (members.length !== size || members.some((m) => m.isLearner || !m.name)) return undefined;
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: selector });
  return pods.items.filter((p) => !p.metadata?.deletionTimestamp).every(isReady) ? true : undefined;
}

async function timed(work: () => Promise<void>): Promise<number> {
  const started = performance.now();
  await work();
  return Math.round(performance.now() - started);
}

async function operatorCreate(name: string): Promise<number> {
  return timed(async () => {
    await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURAL,
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: "EtcdCluster", metadata: { name }, spec: { size: 3 } },
    });
    await waitFor(
      `${name} Available`,
      async () => {
        const c = await getCluster(name);
        const available = c.status?.conditions?.find((x) => x.type === "Available")?.status === "True";
        return available && c.status?.readyMembers === 3
          ? healthyVoters(`etcd_cluster=${name}`, 3)
          : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 50 },
    );
  });
}

/**
 * What the references build pods from: the operator's own pod builder, for a "cluster" that no
 * EtcdCluster object stands behind (the pods are created by the script, not the operator).
 */
function scripted(name: string): { owner: EtcdCluster; spec: NormalizedSpec } {
  const owner = {
    metadata: { name, namespace: NS, uid: `static-${name}` },
    spec: {},
  } as unknown as EtcdCluster;
  const spec = {
    size: 3,
    repository: DEFAULT_REPOSITORY,
    version: DEFAULT_ETCD_VERSION,
    paused: false,
    pod: {},
    maintenance: normalizedMaintenance(undefined),
  };
  return { owner, spec };
}

/** The same three members started at once with a static --initial-cluster, as a script would. */
async function staticCreate(name: string): Promise<number> {
  const { owner, spec } = scripted(name);
  const names = [0, 1, 2].map(() => newMemberName(name));
  const initialCluster = names.map((n) => ({ name: n, peerURL: peerURL(n, name, NS) }));
  const strip = (pod: V1Pod): V1Pod => ({ ...pod, metadata: { ...pod.metadata, ownerReferences: [] } });
  return timed(async () => {
    const service = peerService(owner);
    await core.createNamespacedService({
      namespace: NS,
      body: { ...service, metadata: { ...service.metadata, ownerReferences: [] } },
    });
    await Promise.all(
      names.map((n) =>
        core.createNamespacedPod({
          namespace: NS,
          body: strip(memberPod({ cluster: owner, spec, name: n, initialCluster, state: "new" })),
        }),
      ),
    );
    await waitFor(`${name} static members healthy`, () => healthyVoters(`etcd_cluster=${name}`, 3), {
      timeoutMs: 180_000,
      intervalMs: 50,
    });
  });
}

type Role = "follower" | "leader";

/** The member pod in `role` (a member's name is its pod's name). */
async function victimPod(name: string, role: Role): Promise<V1Pod> {
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` })).items;
  const endpoints = pods.map((p) => `http://${p.status?.podIP}:2379`);
  const statuses = await endpointStatuses(endpoints);
  const leader = leaderId(statuses);
  const index = statuses.findIndex((s) => (s.memberId === leader) === (role === "leader"));
  const pod = pods[index];
  if (!leader || !pod) throw new Error(`no ${role} found in ${name}`);
  return pod;
}

async function operatorHeal(name: string, role: Role): Promise<{ totalMs: number; firstActionMs: number }> {
  const victim = (await victimPod(name, role)).metadata?.name ?? "";
  const started = performance.now();
  await core.deleteNamespacedPod({ namespace: NS, name: victim, gracePeriodSeconds: 0 });
  // The first action is watched on its own, every 25 ms: checking it between health checks (which
  // wait on the dead member's endpoint) made it look later than it was.
  let firstActionMs = -1;
  const firstAction = (async () => {
    while (firstActionMs < 0 && performance.now() - started < 180_000) {
      const events = await core.listNamespacedEvent({
        namespace: NS,
        fieldSelector: `involvedObject.name=${name},reason=MemberReplaced`,
      });
      if (events.items.length > 0) firstActionMs = Math.round(performance.now() - started);
      else await new Promise((r) => setTimeout(r, 25));
    }
  })();
  await waitFor(`${name} healed`, () => healthyVoters(`etcd_cluster=${name}`, 3), {
    timeoutMs: 180_000,
    intervalMs: 50,
  });
  await firstAction;
  return { totalMs: Math.round(performance.now() - started), firstActionMs };
}

/** By hand: remove the dead member, add a learner, start its pod, promote it. */
async function manualHeal(name: string, role: Role): Promise<number> {
  const { owner, spec } = scripted(name);
  const victimPodOf = await victimPod(name, role);
  const victim = victimPodOf.metadata?.name ?? "";
  return timed(async () => {
    await core.deleteNamespacedPod({ namespace: NS, name: victim, gracePeriodSeconds: 0 });
    const endpoints = (await podEndpoints(`etcd_cluster=${name}`)).filter(
      (e) => !victimPodOf.status?.podIP || !e.includes(`//${victimPodOf.status?.podIP}:`),
    );
    const dead = (await listMembers(endpoints)).find((m) => m.name === victim);
    // Without a leader (the leader's pod was the one deleted) the remove waits for the election.
    if (dead)
      await waitFor(
        "dead member removed",
        async () =>
          (await removeMember(endpoints, dead.id).catch(() => false)) === false ? undefined : true,
        { timeoutMs: 60_000, intervalMs: 100 },
      );
    const fresh = newMemberName(name);
    let added: Awaited<ReturnType<typeof addLearner>> | undefined;
    await waitFor(
      "learner added",
      async () => {
        added = await addLearner(endpoints, peerURL(fresh, name, NS)).catch(() => undefined);
        return added;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    const initialCluster = (added?.members ?? []).map((m) => ({
      name: m.name || fresh,
      peerURL: m.peerURLs[0] ?? "",
    }));
    const pod = memberPod({ cluster: owner, spec, name: fresh, initialCluster, state: "existing" });
    await core.createNamespacedPod({
      namespace: NS,
      body: { ...pod, metadata: { ...pod.metadata, ownerReferences: [] } },
    });
    await waitFor(
      "learner promoted",
      async () => ((await promoteLearner(endpoints, added?.member.id ?? "")).promoted ? true : undefined),
      {
        timeoutMs: 60_000,
        intervalMs: 100,
      },
    );
    await waitFor(`${name} healthy`, () => healthyVoters(`etcd_cluster=${name}`, 3), {
      timeoutMs: 60_000,
      intervalMs: 50,
    });
  });
}

const loadBefore = load();
const create = { operator: [] as number[], reference: [] as number[] };
const roles: Role[] = ["follower", "leader"];
const heal = Object.fromEntries(
  roles.map((role) => [
    role,
    { operator: [] as number[], firstAction: [] as number[], reference: [] as number[] },
  ]),
) as Record<Role, { operator: number[]; firstAction: number[]; reference: number[] }>;
for (let i = 0; i < runs; i++) {
  create.reference.push(await staticCreate(`ref-${i}`));
  create.operator.push(await operatorCreate(`op-${i}`));
  for (const role of roles) {
    heal[role].reference.push(await manualHeal(`ref-${i}`, role));
    const healed = await operatorHeal(`op-${i}`, role);
    heal[role].operator.push(healed.totalMs);
    heal[role].firstAction.push(healed.firstActionMs);
  }
}
const loadAfter = load();
const createOp = summary(create.operator);
const createRef = summary(create.reference);
const results = [
  {
    scenario: "create",
    nodes,
    runs,
    operatorMs: createOp,
    referenceMs: createRef,
    ratio: ratio(createOp.median, createRef.median),
    goal: 1.25,
    loadavg: { before: loadBefore, after: loadAfter },
  },
  ...roles.map((role) => {
    const healOp = summary(heal[role].operator);
    const healRef = summary(heal[role].reference);
    return {
      scenario: "heal",
      lost: role,
      nodes,
      runs,
      operatorMs: healOp,
      referenceMs: healRef,
      firstActionMs: summary(heal[role].firstAction),
      firstAction:
        role === "leader"
          ? "the MemberReplaced Event, sent once etcd removed the member: after the survivors elected a leader"
          : "the MemberReplaced Event, sent once etcd removed the member",
      ratio: ratio(healOp.median, healRef.median),
      goal: 1.25,
      loadavg: { before: loadBefore, after: loadAfter },
    };
  }),
];
for (const r of results) process.stdout.write(`${JSON.stringify(r)}\n`);
if (values.save) {
  const file = realNodes ? "convergence-real-nodes" : "convergence";
  process.stderr.write(`saved ${saveResults(file, "convergence", nodes, results)}\n`);
}
await operator.stop();
keepLogs(cluster.dir, (line) => process.stderr.write(`${line}\n`));
await cluster.stop();

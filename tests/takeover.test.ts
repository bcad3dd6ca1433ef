// End-to-end: taking over a cluster the coreos etcd-operator made. Its pods, Services and status
// are created exactly as coreos creates them (tests/helpers/coreos-members.ts: restartPolicy Never,
// its labels, annotations and owner references), with 1,000 keys in etcd; then this operator starts.
// Nothing is restarted or replaced, and a cluster at rest writes no status; then scale, a failed
// pod's replacement and an upgrade 3.5 → 3.6 → 3.7 with a member lost mid-way, never taking a
// voter down on purpose below full strength.
import { setTimeout as sleep } from "node:timers/promises";
import { CustomObjectsApi, PolicyV1Api, type V1Pod } from "@kubernetes/client-node";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, eventsFor, waitFor } from "../infra/local/kube-wait.ts";
import { endpointStatuses, listMembers } from "../shared/etcd-members.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import {
  createCluster,
  etcdClient,
  getCluster,
  memberEndpoints,
  patchSpec,
  waitReady,
} from "./helpers/clusters.ts";
import {
  createCoreosMembers,
  unreadyPublishingDropped,
  writeCoreosStatus,
} from "./helpers/coreos-members.ts";
import { etcdPidOf } from "./helpers/etcd-processes.ts";
import { lastSteps, type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

const NS = "default";
const NAME = "legacy";
const KEYS = 1000;
const V35 = newestPatchOf("3.5") ?? "";
const V36 = newestPatchOf("3.6") ?? "";
const V37 = newestPatchOf("3.7") ?? "";
const local = await startLocalCluster({ name: "e2e-takeover" });
t.teardown(() => local.stop());
const { kc, core } = clientsFor(local.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const policy = kc.makeApiClient(PolicyV1Api);
const kube = new Kube(kc);
const c = { kube, core, custom };
await installCrds(kc);
const processes: OperatorProcess[] = [];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

async function livePods(): Promise<V1Pod[]> {
  const list = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${NAME}` });
  return list.items.filter((p) => !p.metadata?.deletionTimestamp);
}

/** uid and restart count of every pod: what "nothing was restarted or replaced" compares. */
async function podIdentities(): Promise<string[]> {
  return (await livePods())
    .map((p) => `${p.metadata?.name}/${p.metadata?.uid}/${p.status?.containerStatuses?.[0]?.restartCount}`)
    .sort();
}

/** name=ID of every member, read through the leader with a deadline (a dead endpoint is skipped). */
async function memberIds(): Promise<string[]> {
  const members = await listMembers(await memberEndpoints(c, NS, NAME), { timeoutMs: 3000 });
  return members.map((m) => `${m.name}=${m.id}`).sort();
}

async function keysPresent(): Promise<number> {
  const etcd = await etcdClient(c, NS, NAME);
  try {
    return Number(await etcd.getAll().prefix("coreos-key-").count());
  } finally {
    etcd.close();
  }
}

/** Member versions as the members report them; "down" for a live pod that does not answer. */
async function runningVersions(): Promise<string[]> {
  const statuses = await endpointStatuses(await memberEndpoints(c, NS, NAME), { timeoutMs: 2000 });
  return statuses.map((s) => (s.ok ? (s.version ?? "?") : "down")).sort();
}

/** Each live member pod's etcd image, by pod name and uid (a re-created pod is another pod). */
async function podImages(): Promise<Map<string, string>> {
  const pods = await livePods();
  return new Map(
    pods.map((p) => [
      `${p.metadata?.name}/${p.metadata?.uid}`,
      p.spec?.containers.find((x) => x.name === "etcd")?.image ?? "",
    ]),
  );
}

let coreosMembers: string[] = [];

t.test("an operator started on a coreos-made cluster takes it over without touching a member", async (t) => {
  await createCluster(c, NS, NAME, { size: 3, version: V35 });
  const cr = await getCluster(c, NS, NAME);
  coreosMembers = (await createCoreosMembers(core, cr, 3, V35)).members;
  await waitFor(
    "the coreos-made members to be Ready",
    async () => {
      const pods = await livePods();
      const ready = pods.filter((p) =>
        p.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
      );
      return ready.length === 3 ? true : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );
  await writeCoreosStatus(custom, cr, coreosMembers, V35);
  await unreadyPublishingDropped(core, cr);
  const etcd = await etcdClient(c, NS, NAME);
  for (let i = 0; i < KEYS; i += 100) {
    await Promise.all(
      Array.from({ length: 100 }, (_, j) => etcd.put(`coreos-key-${i + j}`).value(`value-${i + j}`)),
    );
  }
  etcd.close();
  const podsBefore = await podIdentities();
  const idsBefore = await memberIds();
  t.equal(idsBefore.length, 3, "coreos made 3 members");

  // The failed-pod test below relies on the Failed phase, not on the (long) unhealthy grace.
  processes.push(startOperatorProcess(local, "all", { MEMBER_UNHEALTHY_GRACE_MS: "600000" }));
  const taken = await waitFor(
    "the operator to write its status",
    async () => {
      const cluster = await getCluster(c, NS, NAME);
      const progressing = cluster.status?.conditions?.find((x) => x.type === "Progressing");
      return progressing?.status === "False" && cluster.status?.readyMembers === 3 ? cluster : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 300 },
  );
  t.same(
    taken.status?.conditions?.map((x) => x.type).sort(),
    ["Available", "Degraded", "Progressing"],
    "coreos's Scaling condition is gone; the three conditions are the operator's",
  );
  t.same(Object.keys(taken.status?.memberVersions ?? {}).sort(), [...coreosMembers].sort());
  const budget = await policy.readNamespacedPodDisruptionBudget({ namespace: NS, name: NAME });
  t.equal(budget.spec?.minAvailable, 2, "a PodDisruptionBudget keeps a majority of 3");
  const peer = await core.readNamespacedService({ namespace: NS, name: NAME });
  t.equal(peer.spec?.publishNotReadyAddresses, true, "the peer Service publishes members that are not Ready");

  const restingVersion = taken.metadata?.resourceVersion;
  // A minute at rest, with a look every 3 s here (RECONCILE_INTERVAL_MS): nothing changes.
  await sleep(60_000);
  const rested = await getCluster(c, NS, NAME);
  t.equal(
    rested.metadata?.resourceVersion,
    restingVersion,
    "a cluster at rest for a minute: no status write",
  );
  t.same(await podIdentities(), podsBefore, "no pod restarted or replaced");
  t.same(await memberIds(), idsBefore, "member IDs unchanged");
  t.equal(await keysPresent(), KEYS, "every key is there");
  const pods = await livePods();
  t.ok(
    pods.every(
      (p) => p.spec?.restartPolicy === "Never" && p.metadata?.labels?.etcd_node === p.metadata?.name,
    ),
    "the coreos pods are as coreos made them",
  );
  const reasons = new Set((await eventsFor(core, NS, NAME)).map((e) => e.reason));
  for (const reason of ["MemberRemoved", "MemberReplaced", "MemberAdded", "PodDeleted", "MemberUpgraded"])
    t.notOk(reasons.has(reason), `no ${reason} Event`);
});

t.test("scale 3 → 5, and a member whose pod failed is replaced at once", async (t) => {
  await patchSpec(c, NS, NAME, { size: 5 });
  await waitReady(c, NS, NAME, 5, 120_000);
  const added = (await livePods()).filter((p) => !coreosMembers.includes(p.metadata?.name ?? ""));
  t.equal(added.length, 2, "two members added");
  for (const pod of added)
    t.equal(
      pod.metadata?.labels?.etcd_node,
      pod.metadata?.name,
      `${pod.metadata?.name} has coreos's etcd_node label`,
    );

  // A coreos pod's etcd exits: under restartPolicy Never the pod is Failed for good.
  const victim = coreosMembers[0] ?? "";
  const pid = etcdPidOf(victim);
  if (pid === undefined) throw new Error(`no etcd process for ${victim}`);
  process.kill(pid, "SIGKILL");
  const failed = await waitFor(
    `${victim} to be Failed`,
    async () => {
      const pod = (await livePods()).find((p) => p.metadata?.name === victim);
      return pod === undefined || pod.status?.phase === "Failed" ? (pod?.status?.phase ?? "gone") : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 200 },
  );
  t.ok(["Failed", "gone"].includes(failed), `the pod ended (${failed})`);
  // The unhealthy grace is 10 minutes here: only the Failed phase can make it go within a minute.
  await waitFor(
    `${victim} replaced`,
    async () => {
      const names = (await livePods()).map((p) => p.metadata?.name);
      const ids = await memberIds();
      return !names.includes(victim) && !ids.some((m) => m.startsWith(`${victim}=`)) ? true : undefined;
    },
    {
      timeoutMs: 60_000,
      intervalMs: 500,
      describe: async () => {
        const pods = (await livePods()).map((p) => `${p.metadata?.name} ${p.status?.phase}`);
        const operator = processes.map((p) => lastSteps(p, 8)).join("\n");
        return `pods ${pods.join(", ")}; members ${(await memberIds()).join(", ")}; the operator's last steps:\n${operator}`;
      },
    },
  );
  await waitReady(c, NS, NAME, 5, 120_000);
  t.equal((await memberIds()).length, 5, "5 members again");
  t.equal(await keysPresent(), KEYS, "every key is there");
  const events = await eventsFor(core, NS, NAME);
  t.ok(
    events.some((e) => e.reason === "MemberReplaced" && e.message.includes(victim)),
    "the failed member was removed",
  );
  const status = await waitFor("status to list the 5 members' versions", async () => {
    const cluster = await getCluster(c, NS, NAME);
    const names = (await livePods()).map((p) => p.metadata?.name ?? "").sort();
    return Object.keys(cluster.status?.memberVersions ?? {})
      .sort()
      .join() === names.join()
      ? cluster
      : undefined;
  });
  t.notOk(
    victim in (status.status?.memberVersions ?? {}),
    "the removed member's version is gone from status",
  );
  // A key kept by the merge patch made every look (every 3 s here) write the status again.
  await sleep(15_000);
  t.equal(
    (await getCluster(c, NS, NAME)).metadata?.resourceVersion,
    status.metadata?.resourceVersion,
    "at rest after the heal: no status write",
  );
});

t.test(
  `an upgrade ${V35} → ${V36} → ${V37} with a member lost mid-way never takes a voter down below full strength`,
  async (t) => {
    const writer = startWriter(() => memberEndpoints(c, NS, NAME), "w");
    await patchSpec(c, NS, NAME, { version: V37 });
    // Once the first member runs 3.6 and all five serve, hold the operator, lose a member still on
    // 3.5 (its pod deleted), and let the operator go on.
    await waitFor(
      "a first member on 3.6",
      async () => ((await runningVersions()).includes(V36) ? true : undefined),
      { timeoutMs: 120_000, intervalMs: 250 },
    );
    await patchSpec(c, NS, NAME, { paused: true });
    await waitFor(
      "all five members serving while paused",
      async () => {
        const versions = await runningVersions();
        return versions.length === 5 && !versions.includes("down") ? versions : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    const statuses = await endpointStatuses(await memberEndpoints(c, NS, NAME), { timeoutMs: 2000 });
    const leader = statuses.find((s) => s.ok)?.leaderId;
    const pods = await livePods();
    const onOld = [];
    for (const pod of pods) {
      const [status] = await endpointStatuses([`http://${pod.status?.podIP}:2379`], { timeoutMs: 2000 });
      if (status?.ok && status.version === V35 && status.memberId !== leader)
        onOld.push(pod.metadata?.name ?? "");
    }
    const lost = onOld[0];
    if (!lost) throw new Error("no follower left on 3.5 to lose");
    await core.deleteNamespacedPod({ namespace: NS, name: lost, gracePeriodSeconds: 0 });
    await waitFor("the lost pod to be gone", async () =>
      (await livePods()).some((p) => p.metadata?.name === lost) ? undefined : true,
    );

    await patchSpec(c, NS, NAME, { paused: false });
    // At every look: the pods' etcd images (an upgrade changes a pod's image in place) and the
    // voters as the leader lists them. An image changed since the last look while fewer than five
    // voters are listed is a member taken down on purpose below full strength. Voters only grow
    // back from four to five here, so a look whose member list could not be read just defers the
    // comparison to the next one.
    const belowStrength: string[] = [];
    let imageChanges = 0;
    let lastImages = new Map<string, string>();
    let fewestServing = 5;
    const seen = new Set<string>();
    await waitFor(
      "every member on 3.7",
      async () => {
        const versions = await runningVersions();
        seen.add(versions.join(","));
        fewestServing = Math.min(fewestServing, versions.filter((v) => v !== "down").length);
        const voters = await listMembers(await memberEndpoints(c, NS, NAME), { timeoutMs: 2000 }).then(
          (members) => members.filter((m) => !m.isLearner).length,
          () => undefined,
        );
        if (voters !== undefined) {
          const images = await podImages();
          for (const [pod, image] of images) {
            const before = lastImages.get(pod);
            if (before === undefined || before === image) continue;
            imageChanges++;
            if (voters < 5) belowStrength.push(`${pod} ${before} → ${image} with ${voters} voters`);
          }
          lastImages = images;
        }
        const cluster = await getCluster(c, NS, NAME);
        const steady = cluster.status?.conditions?.find((x) => x.type === "Progressing")?.status === "False";
        return steady && versions.length === 5 && versions.every((v) => v === V37) ? true : undefined;
      },
      { timeoutMs: 600_000, intervalMs: 200 },
    );
    const { acknowledged } = await writer.stop();

    t.ok(imageChanges >= 5, `the upgrade's image changes were seen (${imageChanges})`);
    t.same(
      belowStrength,
      [],
      `after the loss, no member's image changed while fewer than 5 voters were listed: the replacement came before the next member was upgraded (fewest members answering a status request within 2 s at a look: ${fewestServing})`,
    );
    t.notOk(
      [...seen].some((m) => m.includes(V35) && m.includes(V37)),
      "3.5 and 3.7 never ran side by side",
    );
    t.ok(acknowledged.length > 20, `writes went on during the upgrade (${acknowledged.length})`);
    t.same(
      await missingWrites(await memberEndpoints(c, NS, NAME), acknowledged),
      [],
      "every acknowledged write is present",
    );
    t.equal(await keysPresent(), KEYS, "every key coreos's cluster held is there");
    const events = await eventsFor(core, NS, NAME);
    t.ok(
      events.some((e) => e.reason === "MemberReplaced" && e.message.includes(lost)),
      "the lost member was removed",
    );
    const final = await getCluster(c, NS, NAME);
    t.same(Object.values(final.status?.memberVersions ?? {}), [V37, V37, V37, V37, V37]);
    t.equal(final.status?.currentVersion, V37);
  },
);

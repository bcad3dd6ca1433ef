// End-to-end: a rolling upgrade 3.5 → 3.7 of a 3-member cluster under continuous writes, one minor
// at a time (3.5 → 3.6, the pre-3.6 log drained, 3.6 → 3.7), one member at a time, the leader last,
// the operator SIGKILLed mid-way; no acknowledged write lost. Then a downgrade, refused and touching
// nothing.
import { CustomObjectsApi } from "@kubernetes/client-node";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import { endpointStatuses } from "../shared/etcd-members.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { JSON_PATCH, Kube, MERGE_PATCH } from "../shared/kube.ts";
import { createCluster } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

const NS = "default";
const V35 = newestPatchOf("3.5") ?? "";
const V36 = newestPatchOf("3.6") ?? "";
const V37 = newestPatchOf("3.7") ?? "";
const cluster = await startLocalCluster({ name: "e2e-upgrade" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const kube = new Kube(kc);
await installCrds(kc);
const processes: OperatorProcess[] = [startOperatorProcess(cluster, "all")];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

async function getCluster(name: string): Promise<EtcdCluster> {
  const found = await kube.getCluster(NS, name);
  if (!found) throw new Error(`EtcdCluster ${NS}/${name} not found`);
  return found;
}

async function endpoints(name: string): Promise<string[]> {
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
  return pods.items
    .filter((p) => p.status?.podIP && !p.metadata?.deletionTimestamp)
    .map((p) => `http://${p.status?.podIP}:2379`);
}

/** The versions the members report themselves (etcd's Status RPC), sorted. */
async function runningVersions(name: string): Promise<string[]> {
  const statuses = await endpointStatuses(await endpoints(name), { timeoutMs: 2000 });
  return statuses.map((s) => (s.ok ? (s.version ?? "?") : "down")).sort();
}

t.test(
  `a rolling upgrade ${V35} → ${V37} (through ${V36}) under writes, a worker killed mid-way, loses nothing`,
  async (t) => {
    await createCluster({ kube, core, custom }, NS, "up", { size: 3, version: V35 });
    await waitFor(
      "3 members on 3.5",
      async () => ((await runningVersions("up")).join() === [V35, V35, V35].join() ? true : undefined),
      {
        timeoutMs: 60_000,
      },
    );

    const writer = startWriter(() => endpoints("up"), "k");

    const seen = new Set<string>();
    await custom.patchNamespacedCustomObject(
      {
        group: GROUP,
        version: VERSION,
        namespace: NS,
        plural: PLURAL,
        name: "up",
        body: [{ op: "replace", path: "/spec/version", value: V37 }],
      },
      JSON_PATCH,
    );
    let killed = false;
    await waitFor(
      "every member on 3.7",
      async () => {
        const versions = await runningVersions("up");
        seen.add(versions.join(","));
        // Mid-way (members on two versions), the operator is SIGKILLed and a new one takes over.
        if (!killed && new Set(versions).size > 1) {
          killed = true;
          await processes[0]?.kill("SIGKILL");
          processes.push(startOperatorProcess(cluster, "all"));
        }
        const c = await getCluster("up");
        const steady = c.status?.conditions?.find((x) => x.type === "Progressing")?.status === "False";
        return steady && versions.join() === [V37, V37, V37].join() ? c : undefined;
      },
      { timeoutMs: 420_000, intervalMs: 300 },
    );
    const { acknowledged, longestGapMs } = await writer.stop();

    t.ok(killed, "the operator was SIGKILLed mid-upgrade and a new one finished it");
    const mixes = [...seen];
    t.ok(
      mixes.every((m) => m.split(",").every((v) => [V35, V36, V37, "down"].includes(v))),
      `only 3.5, 3.6 and 3.7 ran (${mixes.join(" | ")})`,
    );
    t.ok(
      mixes.every((m) => m.split(",").filter((v) => v === "down").length <= 1),
      "never more than one member down at a time",
    );
    t.notOk(
      mixes.some((m) => m.includes(V35) && m.includes(V37)),
      "3.5 and 3.7 never ran side by side: one minor at a time",
    );
    t.ok(acknowledged.length > 20, `writes went on during the upgrade (${acknowledged.length})`);
    t.same(
      await missingWrites(await endpoints("up"), acknowledged),
      [],
      "every acknowledged write is present",
    );
    t.ok(longestGapMs < 15_000, `writes never stalled long (longest gap ${longestGapMs} ms)`);
    const events = await core.listNamespacedEvent({ namespace: NS, fieldSelector: "involvedObject.name=up" });
    const upgrades = events.items.filter((e) => e.reason === "MemberUpgraded").length;
    t.equal(upgrades, 6, "one MemberUpgraded Event per member and minor");
    t.ok(
      events.items.some((e) => e.reason === "OldLogDrained"),
      "the pre-3.6 log was drained before the 3.7 step",
    );
    t.ok(
      events.items.some((e) => e.reason === "LeaderMoved"),
      "leadership was moved before the leader's turn",
    );
    const final = await getCluster("up");
    t.equal(final.status?.currentVersion, V37);
    t.same(
      Object.values(final.status?.memberVersions ?? {}),
      [V37, V37, V37],
      "status lists each member's version",
    );
  },
);

t.test("a downgrade is refused with a condition and Event, and nothing changes", async (t) => {
  const before = (
    await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=up" })
  ).items.map((p) => p.spec?.containers[0]?.image);
  await custom.patchNamespacedCustomObject(
    {
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURAL,
      name: "up",
      body: [{ op: "replace", path: "/spec/version", value: V36 }],
    },
    JSON_PATCH,
  );
  const refused = await waitFor("the downgrade to be refused", async () => {
    const c = await getCluster("up");
    const degraded = c.status?.conditions?.find((x) => x.type === "Degraded");
    return degraded?.reason === "VersionRefused" && /downgrade/.test(degraded.message ?? "")
      ? degraded
      : undefined;
  });
  t.match(refused.message ?? "", /downgrade/);
  await new Promise((r) => setTimeout(r, 3000));
  const after = (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=up" })).items.map(
    (p) => p.spec?.containers[0]?.image,
  );
  t.same(after, before, "no pod was touched");
  t.same(await runningVersions("up"), [V37, V37, V37]);
});

t.test(`an allowed downgrade ${V37} → ${V36} follows etcd's procedure under writes`, async (t) => {
  const writer = startWriter(() => endpoints("up"), "d");
  // spec.version is already 3.6 (the refused downgrade above); the annotation lets it through.
  await custom.patchNamespacedCustomObject(
    {
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURAL,
      name: "up",
      body: { metadata: { annotations: { "etcd.database.coreos.com/allow-downgrade": "true" } } },
    },
    MERGE_PATCH,
  );
  const seen = new Set<string>();
  await waitFor(
    "every member on 3.6",
    async () => {
      const versions = await runningVersions("up");
      seen.add(versions.join(","));
      const c = await getCluster("up");
      const steady = c.status?.conditions?.find((x) => x.type === "Progressing")?.status === "False";
      return steady && versions.join() === [V36, V36, V36].join() ? c : undefined;
    },
    { timeoutMs: 240_000, intervalMs: 300 },
  );
  const { acknowledged } = await writer.stop();
  t.ok(
    [...seen].every((m) => m.split(",").filter((v) => v === "down").length <= 1),
    "never more than one member down at a time",
  );
  t.ok(acknowledged.length > 10, `writes went on during the downgrade (${acknowledged.length})`);
  t.same(await missingWrites(await endpoints("up"), acknowledged), [], "every acknowledged write is present");
  const events = await core.listNamespacedEvent({ namespace: NS, fieldSelector: "involvedObject.name=up" });
  t.ok(
    events.items.some((e) => e.reason === "DowngradeEnabled"),
    "etcd's downgrade was enabled first",
  );
  t.equal((await getCluster("up")).status?.currentVersion, V36);
});

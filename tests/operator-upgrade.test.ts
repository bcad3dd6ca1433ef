// End-to-end: a rolling upgrade 3.5 → 3.6 of a 3-member cluster under continuous writes (one
// member at a time, the leader last; no acknowledged write lost), then the refusals: 3.6 → 3.7
// in place (etcd 3.7 crashes on log entries written before 3.6; see functions/plan.ts) and a
// downgrade. A refusal touches nothing.
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import { endpointStatuses } from "../shared/etcd-members.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { JSON_PATCH, Kube } from "../shared/kube.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

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

t.test(`a rolling upgrade ${V35} → ${V36} under writes loses nothing`, async (t) => {
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: NS,
    plural: PLURAL,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "EtcdCluster",
      metadata: { name: "up" },
      spec: { size: 3, version: V35 },
    },
  });
  await waitFor(
    "3 members on 3.5",
    async () => ((await runningVersions("up")).join() === [V35, V35, V35].join() ? true : undefined),
    {
      timeoutMs: 60_000,
    },
  );

  // A writer that records every acknowledged write, and the largest gap between two successes.
  const acknowledged: string[] = [];
  let stop = false;
  let lastSuccess = Date.now();
  let longestGapMs = 0;
  const writer = (async () => {
    let i = 0;
    while (!stop) {
      const client = new Etcd3({ hosts: await endpoints("up").catch(() => []) });
      try {
        const key = `k${i++}`;
        await client.put(key).value("v");
        acknowledged.push(key);
        longestGapMs = Math.max(longestGapMs, Date.now() - lastSuccess);
        lastSuccess = Date.now();
      } catch {
        // Retried with the next key; only acknowledged writes are checked.
      } finally {
        client.close();
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();

  const seen = new Set<string>();
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
  await waitFor(
    "every member on 3.7",
    async () => {
      const versions = await runningVersions("up");
      seen.add(versions.join(","));
      const c = await getCluster("up");
      const steady = c.status?.conditions?.find((x) => x.type === "Progressing")?.status === "False";
      return steady && versions.join() === [V36, V36, V36].join() ? c : undefined;
    },
    { timeoutMs: 240_000, intervalMs: 300 },
  );
  stop = true;
  await writer;

  const mixes = [...seen];
  t.ok(
    mixes.every((m) => m.split(",").every((v) => [V35, V36, "down"].includes(v))),
    `only 3.5 and 3.6 ran (${mixes.join(" | ")})`,
  );
  const client = new Etcd3({ hosts: await endpoints("up") });
  let present = 0;
  for (const key of acknowledged) if ((await client.get(key).string()) === "v") present++;
  client.close();
  t.ok(acknowledged.length > 20, `writes went on during the upgrade (${acknowledged.length})`);
  t.equal(present, acknowledged.length, "every acknowledged write is present");
  t.ok(longestGapMs < 15_000, `writes never stalled long (longest gap ${longestGapMs} ms)`);
  const events = await core.listNamespacedEvent({ namespace: NS, fieldSelector: "involvedObject.name=up" });
  const upgrades = events.items.filter((e) => e.reason === "MemberUpgraded").length;
  t.equal(upgrades, 3, "one MemberUpgraded Event per member");
  t.ok(
    events.items.some((e) => e.reason === "LeaderMoved"),
    "leadership was moved before the leader's turn",
  );
  const final = await getCluster("up");
  t.equal(final.status?.currentVersion, V36);
});

for (const [label, target, pattern] of [
  ["3.6 → 3.7 in place", V37, /3\.6 to 3\.7/],
  ["a downgrade", V35, /downgrade/],
] as const) {
  t.test(`${label} is refused with a condition and Event, and nothing changes`, async (t) => {
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
        body: [{ op: "replace", path: "/spec/version", value: target }],
      },
      JSON_PATCH,
    );
    const refused = await waitFor(`${label} to be refused`, async () => {
      const c = await getCluster("up");
      const degraded = c.status?.conditions?.find((x) => x.type === "Degraded");
      return degraded?.reason === "VersionRefused" && pattern.test(degraded.message ?? "")
        ? degraded
        : undefined;
    });
    t.match(refused.message ?? "", pattern);
    await new Promise((r) => setTimeout(r, 3000));
    const after = (
      await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=up" })
    ).items.map((p) => p.spec?.containers[0]?.image);
    t.same(after, before, "no pod was touched");
    t.same(await runningVersions("up"), [V36, V36, V36]);
  });
}

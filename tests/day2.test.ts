// End-to-end: day-2 care of the members' databases on real etcd. A cluster with a 16 MiB quota is
// filled until etcd raises NOSPACE and refuses writes; the operator compacts, defragments every
// member and disarms the alarm, or, when the live data alone fills the quota, says so and keeps
// writes refused until keys are deleted. A fragmented cluster is defragmented one member at a time,
// followers first and the leader last, under a quorum writer whose every acknowledged write is read
// back.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import type { EtcdCluster } from "../shared/api/etcd-cluster.ts";
import { Kube } from "../shared/kube.ts";
import { eventSeen, eventsOf } from "./helpers/backups.ts";
import {
  type ClusterClients,
  createCluster,
  getCluster,
  memberEndpoints,
  patchSpec,
  waitReady,
} from "./helpers/clusters.ts";
import { leaderMovePause, longestGapAround, maintenanceLog } from "./helpers/defrag-windows.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

const NS = "default";
const MIB = 1024 * 1024;
const QUOTA = 16 * MIB;
const cluster = await startLocalCluster({ name: "e2e-day2" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
const processes: OperatorProcess[] = [startOperatorProcess(cluster, "all")];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

/** A client of one endpoint or all, without etcd3's retries (a refused put must fail at once). */
function client(hosts: string | string[]): Etcd3 {
  return new Etcd3({ hosts, grpcOptions: { "grpc.use_local_subchannel_pool": 1 } });
}

function isNoSpace(error: unknown): boolean {
  return error instanceof Error && error.message.includes("database space exceeded");
}

/** A put etcd answered with NOSPACE: the one that crossed the quota is applied all the same. */
interface RefusedPut {
  key: string;
  value: string;
}

/**
 * Puts random values under keys from `keyOf(i)` until etcd refuses for space; returns what it
 * acknowledged and the put it refused (which etcd may have applied: it checks the quota again after
 * applying a put, and answers NOSPACE for the put that crossed it).
 */
async function fillUntilNoSpace(
  hosts: string[],
  keyOf: (i: number) => string,
): Promise<{ acknowledged: Map<string, string>; refused: RefusedPut }> {
  const etcd = client(hosts);
  const acknowledged = new Map<string, string>();
  try {
    for (let i = 0; i < 10_000; i++) {
      const value = randomBytes(50 * 1024).toString("base64");
      try {
        await etcd.put(keyOf(i)).value(value);
      } catch (error) {
        if (isNoSpace(error)) return { acknowledged, refused: { key: keyOf(i), value } };
        throw error;
      }
      acknowledged.set(keyOf(i), value);
    }
  } finally {
    etcd.close();
  }
  throw new Error("etcd never refused a write for space");
}

/** Whether a put is accepted now (a fresh client each time: a refused put trips etcd3's breaker). */
async function putAccepted(hosts: string[], key: string): Promise<boolean> {
  const etcd = client(hosts);
  try {
    await etcd.put(key).value("probe");
    return true;
  } catch (error) {
    if (isNoSpace(error)) return false;
    throw error;
  } finally {
    etcd.close();
  }
}

/**
 * Keys of `acknowledged` that do not read back with their value (linearizable reads); the key of
 * the refused put may hold that put's value instead.
 */
async function lost(
  hosts: string[],
  acknowledged: Map<string, string>,
  refused?: RefusedPut,
): Promise<string[]> {
  const etcd = client(hosts);
  try {
    const missing: string[] = [];
    for (const [key, value] of acknowledged) {
      const stored = await etcd.get(key).string();
      if (stored !== value && !(key === refused?.key && stored === refused.value)) missing.push(key);
    }
    return missing;
  } finally {
    etcd.close();
  }
}

/** Each member's Status as etcd reports it, by endpoint. */
async function memberStatuses(hosts: string[]) {
  return Promise.all(
    hosts.map(async (host) => {
      const etcd = client(host);
      try {
        const s = await etcd.maintenance.status();
        return {
          host,
          id: s.header.member_id,
          leader: s.leader,
          size: Number(s.dbSize),
          inUse: Number(s.dbSizeInUse),
        };
      } finally {
        etcd.close();
      }
    }),
  );
}

function condition(status: EtcdCluster["status"], type: string) {
  return status?.conditions?.find((x) => x.type === type);
}

t.test("NOSPACE: the operator recovers the space, or says the data alone fills the quota", async (t) => {
  await createCluster(c, NS, "space", { size: 3, maintenance: { quotaBackendBytes: QUOTA } });
  await waitReady(c, NS, "space", 3, 120_000);
  const hosts = await memberEndpoints(c, NS, "space");
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=space" })).items;
  for (const pod of pods) {
    const etcd = pod.spec?.containers.find((x) => x.name === "etcd");
    t.ok(
      etcd?.command?.includes(`--quota-backend-bytes=${QUOTA}`),
      `${pod.metadata?.name}: etcd runs with the quota`,
    );
    t.equal(
      etcd?.readinessProbe?.httpGet?.path,
      "/health?exclude=NOSPACE",
      `${pod.metadata?.name}: a member out of space stays Ready (it still serves reads and deletes)`,
    );
  }

  // Live data alone: 50 KiB values under new keys until the quota refuses.
  const { acknowledged: live } = await fillUntilNoSpace(hosts, (i) => `live/${String(i).padStart(5, "0")}`);
  t.ok(live.size > 100, `${live.size} distinct keys written before etcd refused for space`);
  const refusedAt = Date.now();
  t.ok(
    await eventSeen(
      c,
      NS,
      "EtcdCluster",
      "space",
      (e) => e.reason === "NoSpace" && /data alone fills the quota/.test(e.message ?? ""),
      90_000,
    ),
    "compacted and defragmented, the operator reports that the data alone fills the quota",
  );
  // The reconcile sends a step's Event before it writes the status that goes with it.
  let status = await waitFor(
    "the NoSpace condition",
    async () => {
      const s = (await getCluster(c, NS, "space")).status;
      return condition(s, "NoSpace") ? s : undefined;
    },
    { timeoutMs: 15_000, intervalMs: 200 },
  );
  t.equal(condition(status, "NoSpace")?.status, "True", "NoSpace is True while writes are refused");
  t.match(condition(status, "NoSpace")?.message, /raised NOSPACE/);
  t.ok(
    Date.parse(condition(status, "NoSpace")?.lastTransitionTime ?? "") <= Date.now(),
    "its lastTransitionTime says since when",
  );
  t.equal(condition(status, "Degraded")?.reason, "NoSpace", "the cluster is Degraded for it");
  t.equal(
    await putAccepted(hosts, "probe/still-full"),
    false,
    "the alarm is not disarmed while the data fills the quota",
  );
  t.equal(await readyPodsOf("space"), 3, "every member stays Ready: reads go on through the client Service");

  // Deletes are allowed under NOSPACE: give half the keys back, the operator does the rest.
  const etcd = client(hosts);
  const keys = [...live.keys()];
  const deleted = keys.slice(0, Math.ceil(keys.length / 2));
  for (const key of deleted) await etcd.delete().key(key);
  etcd.close();
  for (const key of deleted) live.delete(key);
  await waitFor(
    "writes to be accepted again",
    async () => ((await putAccepted(hosts, "probe/after-delete")) ? true : undefined),
    {
      timeoutMs: 120_000,
      intervalMs: 500,
    },
  );
  t.comment(
    `writes refused for ${((Date.now() - refusedAt) / 1000).toFixed(1)} s (including the test's deletes)`,
  );
  t.ok(
    await eventSeen(
      c,
      NS,
      "EtcdCluster",
      "space",
      (e) =>
        e.reason === "SpaceRecovered" &&
        /compacted the history to revision \d+, defragmented 3 member\(s\) .* and disarmed \d+ NOSPACE alarm\(s\): writes are accepted again/.test(
          e.message ?? "",
        ),
    ),
    "the SpaceRecovered Event says what was done",
  );
  t.same(
    await lost(hosts, live),
    [],
    "every acknowledged key that was not deleted reads back with its value",
  );

  // History alone: overwrite a few keys until refused; compaction gives it all back.
  const { acknowledged: history, refused } = await fillUntilNoSpace(hosts, (i) => `history/${i % 10}`);
  const historyRefusedAt = Date.now();
  await waitFor(
    "writes to be accepted again",
    async () => ((await putAccepted(hosts, "probe/after-history")) ? true : undefined),
    {
      timeoutMs: 120_000,
      intervalMs: 200,
    },
  );
  t.comment(
    `history filled the quota: writes refused for ${((Date.now() - historyRefusedAt) / 1000).toFixed(1)} s until the operator recovered`,
  );
  t.same(
    await lost(hosts, history, refused),
    [],
    "the newest value of every overwritten key reads back (only history was compacted)",
  );
  t.same(await lost(hosts, live), [], "and every earlier key");
  status = await waitFor(
    "the NoSpace condition to turn False",
    async () => {
      const s = (await getCluster(c, NS, "space")).status;
      return condition(s, "NoSpace")?.status === "False" ? s : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 300 },
  );
  t.equal(condition(status, "NoSpace")?.reason, "SpaceRecovered");
  t.match(
    condition(status, "NoSpace")?.message,
    /^writes were refused from \S+ to \S+ \(\d+ s\); accepted again$/,
  );
  t.ok(status?.lastDefragmentation?.member, "status.lastDefragmentation names the member done last");
  const sizes = await memberStatuses(hosts);
  for (const s of sizes)
    t.ok(s.size < QUOTA * 0.9, `${s.host}: database ${(s.size / MIB).toFixed(1)} MiB, under the quota`);
  const events = await eventsOf(c, NS, "EtcdCluster", "space");
  t.ok(events.filter((e) => e.reason === "SpaceRecovered").length >= 2, "both recoveries announced");
});

async function readyPodsOf(name: string): Promise<number> {
  const list = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
  return list.items.filter((p) =>
    p.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
  ).length;
}

t.test("defragmentation: one member at a time, the leader last, under a quorum writer", async (t) => {
  await createCluster(c, NS, "frag", {
    size: 3,
    // Off while the test fragments the members, so that it sees them all fragmented first.
    maintenance: { defragmentation: { enabled: false, thresholdPercent: 50, minimumBytes: 8 * MIB } },
  });
  await waitReady(c, NS, "frag", 3, 120_000);
  const hosts = await memberEndpoints(c, NS, "frag");
  // Fragment: 48 MiB in, all deleted, history compacted (as an application's auto-compaction would).
  const etcd = client(hosts);
  for (let i = 0; i < 48; i++) await etcd.put(`churn/${i}`).value(randomBytes(MIB));
  const { header } = await etcd.delete().prefix("churn/");
  await etcd.kv.compact({ revision: header.revision, physical: true });
  etcd.close();
  // The quorum writer's puts also make each member commit, which is when etcd counts its free pages.
  const writer = startWriter(() => memberEndpoints(c, NS, "frag"), "w/", { intervalMs: 20 });
  // Each member applies the compaction on its own, a moment apart.
  const before = await waitFor(
    "every member to apply the compaction",
    async () => {
      const statuses = await memberStatuses(hosts);
      return statuses.every((s) => s.inUse < s.size / 2) ? statuses : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
  const leaderBefore = before[0]?.leader;
  for (const s of before)
    t.ok(
      s.size > 40 * MIB && s.inUse < s.size / 2,
      `${s.host}: ${(s.size / MIB).toFixed(1)} MiB file, ${(s.inUse / MIB).toFixed(1)} MiB in use`,
    );

  await patchSpec(c, NS, "frag", { maintenance: { defragmentation: { enabled: true } } });
  const defragmented = await waitFor(
    "every member defragmented",
    async () => {
      const done = (await eventsOf(c, NS, "EtcdCluster", "frag")).filter(
        (e) => e.reason === "MemberDefragmented",
      );
      return done.length >= 3 ? done : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 300 },
  );
  await sleep(1_000);
  const result = await writer.stop();
  t.same(
    await missingWrites(hosts, result.acknowledged),
    [],
    `all ${result.acknowledged.length} acknowledged writes read back`,
  );
  t.comment(
    `quorum writer: ${result.acknowledged.length} of ${result.attempted} puts acknowledged, longest gap ${result.longestGapMs} ms`,
  );
  const acks = [...result.acknowledged].sort((a, b) => a.atMs - b.atMs);
  const log = maintenanceLog(processes[0]?.logFile ?? "", `${NS}/frag`);
  t.equal(log.defrags.length, 3, "the operator's log has the three defragmentations");
  for (const d of log.defrags) {
    const gap = longestGapAround(acks, d.startMs, d.endMs);
    t.comment(
      `${d.member}: defragmented in ${Math.round(d.endMs - d.startMs)} ms, longest write gap around it ${gap} ms`,
    );
  }
  const movedAt = log.leaderMovesMs[0];
  if (movedAt !== undefined)
    t.comment(`pause at the leader move: ${leaderMovePause(acks, movedAt, log.defrags)} ms`);
  t.ok(result.acknowledged.length > 0, "writes went on during the defragmentations");

  const after = await memberStatuses(hosts);
  for (const s of after) t.ok(s.size < 16 * MIB, `${s.host}: ${(s.size / MIB).toFixed(1)} MiB after`);
  const events = await eventsOf(c, NS, "EtcdCluster", "frag");
  const moved = events.find((e) => e.reason === "LeaderMoved" && /defragmented last/.test(e.message ?? ""));
  t.ok(moved, "leadership moved away before the leader was defragmented");
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=frag" })).items;
  const leaderPod = pods.find(
    (p) => before.find((s) => s.id === leaderBefore)?.host === `http://${p.status?.podIP}:2379`,
  );
  const members = defragmented.map((e) => /defragmented member (\S+)/.exec(e.message ?? "")?.[1]);
  t.equal(new Set(members).size, 3, "each member defragmented once");
  const status = (await getCluster(c, NS, "frag")).status;
  t.equal(
    status?.lastDefragmentation?.member,
    leaderPod?.metadata?.name,
    "the leader of before was done last",
  );
  t.ok(
    (status?.lastDefragmentation?.dbSizeAfter ?? Infinity) < (status?.lastDefragmentation?.dbSizeBefore ?? 0),
    "status says how much it gave back",
  );
  t.equal(condition(status, "Available")?.status, "True");
});

t.test("a defragmentation schedule: every member once at the schedule's time, the leader last", async (t) => {
  await createCluster(c, NS, "sched", {
    size: 3,
    maintenance: { defragmentation: { enabled: false, schedule: "* * * * *" } },
  });
  await waitReady(c, NS, "sched", 3, 120_000);
  const created = Date.now();
  // The first minute boundary after the members exist is the schedule's first time for them.
  const firstTime = Math.ceil(created / 60_000) * 60_000;
  const status = await waitFor(
    "every member defragmented by the schedule",
    async () => {
      const s = (await getCluster(c, NS, "sched")).status;
      const done = Object.values(s?.memberDefragmentations ?? {}).filter((at) => Date.parse(at) >= firstTime);
      return done.length === 3 ? s : undefined;
    },
    { timeoutMs: 150_000, intervalMs: 500 },
  );
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=sched" })).items;
  t.same(
    Object.keys(status?.memberDefragmentations ?? {}).sort(),
    pods.map((p) => p.metadata?.name).sort(),
    "status.memberDefragmentations names every member",
  );
  const events = await eventsOf(c, NS, "EtcdCluster", "sched");
  t.ok(
    events.filter((e) => e.reason === "MemberDefragmented").length >= 3,
    "each defragmentation is an Event",
  );
  t.ok(
    events.some((e) => e.reason === "LeaderMoved" && /defragmented last/.test(e.message ?? "")),
    "the leader was done last, after leadership moved",
  );
  t.equal(condition(status, "Available")?.status, "True");
});

// Step: make the 3.6 → 3.7 upgrade safe. etcd 3.7 dropped the v2 store and cannot apply log
// entries written before 3.6 (a member restarted on 3.7 with such entries after its last snapshot
// panics: "unmarshal should never fail"). A restarting member replays its log from its last
// snapshot, so every member must take a snapshot past those entries first. etcd 3.6 snapshots every
// --snapshot-count (10,000) applied entries; this step appends more than that many no-op entries,
// lease grants and revokes (no key and no revision changes, invisible to clients), and waits until
// every voter has applied them. Then it marks the cluster, and the upgrade to 3.7 may begin.
import { OLD_LOG_DRAINED_ANNOTATION } from "../shared/api/etcd-cluster.ts";
import { createEtcdClient, endpointStatuses } from "../shared/etcd-members.ts";
import { memberPodName } from "./plan.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome } from "./step.ts";

/** More than etcd 3.6's default --snapshot-count (10,000), so every member snapshots once. */
export const DRAIN_ENTRIES = 10_100;
const IN_FLIGHT = 32;
const APPLY_TIMEOUT_MS = 60_000;

async function appendNoOps(endpoint: string, deps: StepDeps, entries: number): Promise<void> {
  const client = createEtcdClient(endpoint, deps.etcd);
  try {
    let next = 0;
    const pairs = Math.ceil(entries / 2);
    const worker = async () => {
      while (next < pairs) {
        next++;
        const { ID } = await client.leaseClient.leaseGrant({ TTL: 60 });
        await client.leaseClient.leaseRevoke({ ID });
      }
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  } finally {
    client.close();
  }
}

export async function drainOldLog(input: StepInput, deps: StepDeps): Promise<StepOutcome> {
  const endpoints = memberEndpoints(input.observation);
  const first = endpoints[0];
  if (!first) return { requeueAfterMs: 1_000 };
  const voterPods = new Set(
    (input.observation.members ?? []).filter((m) => !m.isLearner).map((m) => memberPodName(m) ?? ""),
  );
  const voterEndpoints = input.observation.pods
    .filter((p) => voterPods.has(p.name) && p.ip)
    .map((p) => `http://${p.ip}:2379`);
  await deps.guard();
  const started = Date.now();
  await appendNoOps(first, deps, DRAIN_ENTRIES);
  const [leaderView] = await endpointStatuses([first], deps.etcd);
  const target = BigInt(leaderView?.raftIndex ?? "0");
  // Every voter must have applied them (and so passed a snapshot) before any of them restarts on 3.7.
  for (;;) {
    const statuses = await endpointStatuses(voterEndpoints, deps.etcd);
    if (statuses.every((s) => s.ok && BigInt(s.raftAppliedIndex ?? "0") >= target)) break;
    if (Date.now() - started > APPLY_TIMEOUT_MS) {
      throw new Error(
        `members did not apply the drain entries (up to index ${target}) within ${APPLY_TIMEOUT_MS / 1000} s`,
      );
    }
    await deps.guard();
    await new Promise((r) => setTimeout(r, 250));
  }
  await deps.guard();
  await deps.kube.annotateCluster(input.cluster, { [OLD_LOG_DRAINED_ANNOTATION]: "true" });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  return {
    requeueAfterMs: 0,
    event: {
      type: "Normal",
      reason: "OldLogDrained",
      message:
        `appended ${DRAIN_ENTRIES} no-op log entries (lease grant/revoke: no key or revision changes) in ${seconds} s so ` +
        "every member snapshots past the entries written before 3.6, which etcd 3.7 cannot read; upgrading to 3.7 next",
    },
  };
}

// Steps that give a member's free database pages back: `defragmentOne` when a member's file passes
// the cluster's fragmentation threshold (the planner picks followers first, the leader last as a
// follower), and `recoverSpace` when etcd raised NOSPACE and refuses writes: compact the history
// to the current revision, defragment every member in turn, and disarm the alarm once the data
// fits in the quota with room to spare.
import type { EtcdClusterStatus } from "../shared/api/etcd-cluster.ts";
import { compactHistory, defragmentMember, disarmAlarms, NOSPACE } from "../shared/etcd-maintenance.ts";
import { type EndpointStatus, endpointStatuses } from "../shared/etcd-members.ts";
import { CLIENT_PORT } from "../shared/member-pods.ts";
import { operatorMetrics } from "../shared/metrics.ts";
import { newestRevision, type Observation } from "./plan.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome } from "./step.ts";

/** etcd's space quota when the member does not say (before 3.6) and the spec sets none. */
const ETCD_DEFAULT_QUOTA_BYTES = 2 * 1024 * 1024 * 1024;
/**
 * The alarm is disarmed only when every member's file is at most this share of its quota after the
 * recovery: disarming a cluster whose data alone fills the quota would let the next write raise it
 * again at once, and the operator would compact and defragment in a loop.
 */
const DISARM_BELOW_SHARE = 0.9;

type LastDefragmentation = NonNullable<EtcdClusterStatus["lastDefragmentation"]>;

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

function endpointOf(observation: Observation, name: string): string | undefined {
  const ip = observation.pods.find((p) => p.name === name && !p.terminating)?.ip;
  return ip ? `http://${ip}:${CLIENT_PORT}` : undefined;
}

/** Defragments one member and reads its size back; the time it was blocked goes to the metrics. */
async function defragmentAndMeasure(
  deps: StepDeps,
  name: string,
  endpoint: string,
  before: number,
): Promise<LastDefragmentation> {
  const metrics = operatorMetrics();
  const started = performance.now();
  try {
    await defragmentMember(endpoint, deps.etcd);
  } catch (error) {
    metrics.defragmentations.inc({ result: "error" });
    metrics.defragmentationSeconds.observe({ result: "error" }, (performance.now() - started) / 1000);
    throw error;
  }
  const seconds = (performance.now() - started) / 1000;
  metrics.defragmentations.inc({ result: "ok" });
  metrics.defragmentationSeconds.observe({ result: "ok" }, seconds);
  const [after] = await endpointStatuses([endpoint], deps.etcd);
  deps.log.info({ member: name, seconds, before, after: after?.dbSize }, "member defragmented");
  return {
    member: name,
    finishedAt: new Date().toISOString(),
    durationSeconds: Math.round(seconds * 1000) / 1000,
    dbSizeBefore: before,
    dbSizeAfter: after?.ok ? (after.dbSize ?? before) : before,
  };
}

export async function defragmentOne(
  input: StepInput,
  deps: StepDeps,
  name: string,
  dbSize: number,
  fragmented: number,
): Promise<StepOutcome> {
  const endpoint = endpointOf(input.observation, name);
  if (!endpoint) return { requeueAfterMs: 0 };
  await deps.guard();
  const done = await defragmentAndMeasure(deps, name, endpoint, dbSize);
  return {
    requeueAfterMs: 0,
    defragmented: [done],
    event: {
      type: "Normal",
      reason: "MemberDefragmented",
      message:
        `defragmented member ${name} (${fragmented}% of its database was free): ` +
        `${mib(done.dbSizeBefore)} → ${mib(done.dbSizeAfter)}, blocked ${done.durationSeconds.toFixed(2)} s`,
    },
  };
}

/** The members to defragment in a recovery: every one that answers, followers first, the leader last. */
function answeringMembersLeaderLast(observation: Observation): { name: string; status: EndpointStatus }[] {
  const answering = [...observation.health.entries()].flatMap(([name, status]) =>
    status.ok ? [{ name, status }] : [],
  );
  const leader = answering.find((m) => m.status.leaderId && m.status.leaderId === m.status.memberId);
  return [...answering.filter((m) => m !== leader), ...(leader ? [leader] : [])];
}

export async function recoverSpace(
  input: StepInput,
  deps: StepDeps,
  outOfSpace: string[],
): Promise<StepOutcome> {
  const { observation } = input;
  const metrics = operatorMetrics();
  const members = answeringMembersLeaderLast(observation);
  const revision = newestRevision(observation);
  await deps.guard();
  await deps.kube.event(
    input.cluster,
    "Warning",
    "NoSpace",
    `etcd refuses writes: member(s) ${outOfSpace.join(", ")} raised ${NOSPACE} (the database reached its space ` +
      `quota); compacting the history to revision ${revision}, defragmenting ${members.length} member(s), then disarming`,
    { key: `nospace.${revision}` },
  );
  const done: LastDefragmentation[] = [];
  try {
    const compacted = await compactHistory(memberEndpoints(observation), revision, deps.etcd);
    deps.log.info({ revision, compacted }, "history compacted");
    for (const member of members) {
      const endpoint = endpointOf(observation, member.name);
      if (!endpoint) continue;
      await deps.guard();
      done.push(await defragmentAndMeasure(deps, member.name, endpoint, member.status.dbSize ?? 0));
    }
  } catch (error) {
    metrics.spaceRecoveries.inc({ result: "error" });
    throw new Error(`recovering from ${NOSPACE} failed`, { cause: error });
  }
  const after = await endpointStatuses(
    members.flatMap((m) => endpointOf(observation, m.name) ?? []),
    deps.etcd,
  );
  const quota =
    after.find((s) => s.ok && s.dbSizeQuota)?.dbSizeQuota ??
    input.spec.maintenance.quotaBackendBytes ??
    ETCD_DEFAULT_QUOTA_BYTES;
  const largestBefore = Math.max(0, ...members.map((m) => m.status.dbSize ?? 0));
  const largest = Math.max(0, ...after.map((s) => (s.ok ? (s.dbSize ?? 0) : 0)));
  const sizes = `largest database ${mib(largestBefore)} → ${mib(largest)} of a ${mib(quota)} quota`;
  if (largest > quota * DISARM_BELOW_SHARE || after.some((s) => !s.ok)) {
    metrics.spaceRecoveries.inc({ result: "still_full" });
    return {
      requeueAfterMs: 30_000,
      defragmented: done,
      spaceRecovery: { revision, finishedAt: new Date().toISOString(), result: "StillFull" },
      event: {
        type: "Warning",
        reason: "NoSpace",
        message:
          `compacted to revision ${revision} and defragmented, but the data alone fills the quota (${sizes}); ` +
          "writes stay refused: delete keys or raise spec.maintenance.quotaBackendBytes (applies to new members)",
      },
    };
  }
  await deps.guard();
  const disarmed = await disarmAlarms(memberEndpoints(observation), NOSPACE, deps.etcd);
  metrics.spaceRecoveries.inc({ result: "recovered" });
  return {
    requeueAfterMs: 0,
    defragmented: done,
    spaceRecovery: { revision, finishedAt: new Date().toISOString(), result: "Recovered" },
    event: {
      type: "Normal",
      reason: "SpaceRecovered",
      message:
        `compacted the history to revision ${revision}, defragmented ${members.length} member(s) (${sizes}) and ` +
        `disarmed ${disarmed} ${NOSPACE} alarm(s): writes are accepted again`,
    },
  };
}

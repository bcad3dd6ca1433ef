// The reconcile planner: from one observation of the world (the EtcdCluster, its pods and
// Services, etcd's member list and each member's health) pick the ONE next step. Pure: no I/O, so
// every rule is unit-tested, and replaying a decision on the same world gives the same step.
//
// Rules, in order (quorum first — a step never leaves fewer than a majority of voters healthy):
//  1. Services or the quorum PodDisruptionBudget missing (or sized for another size) → fix them.
//  2. No pods, no members → bootstrap a brand-new cluster: all spec.size members at once with a
//     static --initial-cluster (nothing to lose yet, and far faster than joining one by one). If
//     the cluster had members before, report that all members are lost instead: re-seeding would
//     silently start an empty database. A bootstrap cut short (worker killed after some pods) is
//     finished from the member list recorded on the pods.
//  3. Pods but nobody answers → wait while members start; after that, quorum is lost.
//  4. A member added to etcd whose pod was never created → create it (finishes a half-done add).
//  5. A started member whose pod is gone → with persistent volumes, when its volume claim survives,
//     create its pod again on it (same name, same member ID, its data); else remove it from etcd
//     (if quorum allows), then add anew. While etcd cannot answer (every pod gone, say), members
//     with a surviving claim come back first, before anything is called lost.
//  6. A pod that is no member → delete it (a removed member, or a pod of an undone add); then the
//     claim of a member that is no more → delete it.
//  7. A learner whose pod is Ready → promote it; etcd refuses while it lags, so we retry.
//  8. A voter whose pod stays not Ready past a grace period (crash loop, lost data dir), or whose
//     pod ended for good (phase Failed or Succeeded: it never runs again), is replaced when quorum
//     allows; while any voter is unhealthy, do not scale.
//  9. Members run an older version than spec.version → upgrade one member at a time along the
//     path etcd allows (one minor per phase), followers first; the leader last, after moving
//     leadership to an upgraded member. Each member is taken down only once every voter the spec
//     asks for is present and healthy and runs what its pod says: a lost member is replaced
//     first. Downgrades are refused.
// 10. TLS certificates changed (spec.TLS Secrets): members still on the old ones are replaced one
//     at a time, add-then-remove (see planRotation), followers first, the leader last.
// 11. Fewer voters than spec.size → add one; more → remove one follower (never the leader).
//
// Day-2 care, between them:
//  - A member raised NOSPACE (its database reached the space quota; etcd refuses writes) → compact,
//    defragment every member, disarm (recover-space), as soon as a majority of voters answers:
//    before rule 8, since members out of space still answer and nothing else helps writes.
// 12. Only at full strength with every voter healthy and nothing else to do: a member whose database
//    file is mostly free pages is defragmented, followers first, the leader last after leadership
//    moved to a defragmented member.
import {
  ALLOW_DOWNGRADE_ANNOTATION,
  type EtcdCluster,
  type NormalizedSpec,
} from "../shared/api/etcd-cluster.ts";
import { previousCronTime } from "../shared/cron.ts";
import { fragmentedPercent, NOSPACE, raisedAlarms } from "../shared/etcd-maintenance.ts";
import type { EndpointStatus, MemberInfo } from "../shared/etcd-members.ts";
import { compareVersions, downgradeProblem, minorOf, upgradePath } from "../shared/etcd-versions.ts";
import { memberNameFromPeerURL } from "../shared/member-pods.ts";

export interface PodView {
  name: string;
  /** Pod IP, once the pod has one. */
  ip?: string;
  /** Names of all members of the bootstrap this pod was created in (see seed). */
  bootstrap?: string[];
  /** The etcd version the pod is set to run (its image tag). */
  version?: string;
  /** How long the pod has not been Ready (0 while it is). */
  notReadyForMs?: number;
  /** The pod's phase; Failed and Succeeded are final (see podEnded). */
  phase: string;
  ready: boolean;
  terminating: boolean;
  createdAtMs: number;
  /** The digest of the TLS certificates the pod was created with (member-tls.ts). */
  tlsHash?: string;
}

/** A member's PersistentVolumeClaim (persistent storage only). */
export interface ClaimView {
  name: string;
  /** The member (pod) whose data it holds. */
  member: string;
  terminating: boolean;
}

export interface Observation {
  nowMs: number;
  cluster: EtcdCluster;
  spec: NormalizedSpec;
  pods: PodView[];
  /**
   * Which of the cluster's Services exist (the peer Service only counts when it publishes members
   * that are not Ready), and whether its PodDisruptionBudget keeps the right quorum.
   */
  services: { peer: boolean; client: boolean; budget?: boolean };
  /** undefined when no member endpoint answered. */
  members?: MemberInfo[];
  /** The members' PersistentVolumeClaims; undefined when the cluster keeps data in emptyDirs. */
  claims?: ClaimView[];
  /** Health of each pod's client endpoint, by pod name. */
  health: Map<string, EndpointStatus>;
  /** The cluster was formed before (status recorded members): losing every pod is data loss. */
  hadMembers: boolean;
  /** etcd's cluster version ("3.6.0"): raised by the leader once every member runs that minor. */
  clusterVersion?: string;
  /** A voter whose pod stays not Ready this long is replaced (crash loop, lost data dir, …). */
  unhealthyGraceMs?: number;
  /** The user allowed a downgrade (the cluster's allow-downgrade annotation). */
  allowDowngrade?: boolean;
  /** Every member snapshotted past the log entries written before 3.6 (see drain-old-log). */
  oldLogDrained?: boolean;
  /** A quorum-loss recovery under way (the cluster's recovery annotation). */
  recovery?: RecoveryMark;
  /**
   * When no member can answer through a leader (quorum lost), the member list as the answering
   * members themselves last knew it; only for deciding a quorum-loss recovery.
   */
  localMembers?: MemberInfo[];
  /** A TLS cluster whose Secrets passed their checks: the digest of the member certificates. */
  tls?: { hash: string };
}

/** What a quorum-loss recovery records on the EtcdCluster while it runs. */
export interface RecoveryMark {
  /** The surviving member pod whose data the cluster is rebuilt from. */
  survivor: string;
  /** The new member started from the survivor's snapshot. */
  seed: string;
  /** The survivor's raft applied index when the recovery began. */
  appliedIndex: string;
  startedAtMs: number;
}

export type Step =
  | { kind: "ensure-services" }
  | { kind: "seed"; names?: string[] }
  | { kind: "add-member"; version?: string; reason?: "tls-rotation" }
  | { kind: "create-member-pod"; name: string; memberId: string }
  | { kind: "promote-member"; name: string; memberId: string }
  | { kind: "remove-member"; name: string; memberId: string; reason: "scale-down" | "dead" | "tls-rotation" }
  | { kind: "delete-pod"; name: string; reason: string }
  | { kind: "restart-member"; name: string }
  | { kind: "delete-claim"; name: string; member: string }
  | { kind: "upgrade-member"; name: string; memberId: string; from: string; to: string }
  | { kind: "drain-old-log" }
  | { kind: "enable-downgrade"; target: string }
  | { kind: "move-leader"; fromId: string; toId: string; toName: string; reason: string }
  | { kind: "version-refused"; message: string }
  | { kind: "wait"; reason: string; message: string; afterMs: number }
  | { kind: "all-members-lost" }
  | { kind: "recover-from-member"; survivor: string; appliedIndex: string; lost: number; voters: number }
  | { kind: "create-recovery-seed"; seed: string; survivorIp: string }
  | { kind: "finish-recovery"; seed: string; survivor: string }
  | { kind: "abort-recovery"; message: string }
  | { kind: "quorum-lost"; message: string }
  | { kind: "recover-space"; members: string[] }
  | { kind: "defragment-member"; name: string; memberId: string; dbSize: number; fragmentedPercent: number }
  | { kind: "steady" };

/** A member defragmented this recently is not defragmented again (a file that stays fragmented after one). */
export const DEFRAG_COOLDOWN_MS = 10 * 60_000;

/** How long members may take to start before "nobody answers" means quorum is lost. */
export const STARTUP_GRACE_MS = 60_000;
/** Default for Observation.unhealthyGraceMs. */
export const DEFAULT_UNHEALTHY_GRACE_MS = 60_000;
/** A recovery seed that does not serve within this time is given up. */
export const RECOVERY_TIMEOUT_MS = 10 * 60_000;

export function majority(voters: number): number {
  return Math.floor(voters / 2) + 1;
}

/** The pod a member runs in: its name once started, else the host of its peer URL. */
export function memberPodName(member: MemberInfo): string | undefined {
  if (member.name) return member.name;
  const first = member.peerURLs[0];
  return first ? memberNameFromPeerURL(first) : undefined;
}

/**
 * A pod in phase Failed or Succeeded will never run again (its containers stopped under
 * restartPolicy Never or OnFailure, as coreos made member pods): its member is replaced at once.
 */
export function podEnded(pod: PodView): boolean {
  return pod.phase === "Failed" || pod.phase === "Succeeded";
}

function isHealthy(observation: Observation, podName: string): boolean {
  return observation.health.get(podName)?.ok === true;
}

function leaderId(observation: Observation): string | undefined {
  for (const status of observation.health.values()) if (status.ok && status.leaderId) return status.leaderId;
  return undefined;
}

/** The newest store revision any answering member reports ("0" when none does). */
export function newestRevision(o: Observation): string {
  let newest = 0n;
  for (const status of o.health.values()) {
    if (status.ok && status.revision && BigInt(status.revision) > newest) newest = BigInt(status.revision);
  }
  return newest.toString();
}

/**
 * A quorum-loss recovery in progress: nothing else happens until the seed (started from the
 * survivor's snapshot) serves; then every other pod goes and the ordinary rules grow the cluster.
 */
function planRecovery(o: Observation, mark: RecoveryMark): Step {
  const seed = o.pods.find((p) => p.name === mark.seed);
  if (!seed) {
    const survivor = o.pods.find((p) => p.name === mark.survivor && !p.terminating);
    if (!survivor?.ip)
      return {
        kind: "abort-recovery",
        message: `the surviving member ${mark.survivor} is gone before its data was copied`,
      };
    return { kind: "create-recovery-seed", seed: mark.seed, survivorIp: survivor.ip };
  }
  if (seed.terminating)
    return { kind: "abort-recovery", message: `the recovery seed ${mark.seed} was deleted` };
  if (seed.ready && isHealthy(o, seed.name))
    return { kind: "finish-recovery", seed: mark.seed, survivor: mark.survivor };
  if (o.nowMs - mark.startedAtMs > RECOVERY_TIMEOUT_MS) {
    return {
      kind: "abort-recovery",
      message: `the recovery seed ${mark.seed} did not serve within ${RECOVERY_TIMEOUT_MS / 60_000} minutes`,
    };
  }
  return wait("RecoveringQuorum", `seed member ${mark.seed} is starting from ${mark.survivor}'s data`, 1000);
}

/**
 * When a majority of the voters' pods are gone for good (their data went with them), quorum can
 * never return by itself: rebuild from the answering survivor that applied the most.
 */
function recoveryFromSurvivor(o: Observation, voters: MemberInfo[]): Step | undefined {
  const livePods = new Set(o.pods.filter((p) => !p.terminating).map((p) => p.name));
  const lost = voters.filter((m) => {
    const pod = memberPodName(m);
    return !pod || !livePods.has(pod);
  });
  if (voters.length - lost.length >= majority(voters.length)) return undefined;
  let best: { pod: string; applied: bigint } | undefined;
  for (const voter of voters) {
    const pod = memberPodName(voter);
    const status = pod ? o.health.get(pod) : undefined;
    if (!pod || !livePods.has(pod) || !status?.ok || !status.raftAppliedIndex) continue;
    const applied = BigInt(status.raftAppliedIndex);
    if (!best || applied > best.applied) best = { pod, applied };
  }
  if (!best) return undefined;
  return {
    kind: "recover-from-member",
    survivor: best.pod,
    appliedIndex: best.applied.toString(),
    lost: lost.length,
    voters: voters.length,
  };
}

/** Every member name the cluster is known to have: etcd's list when it answers, else the last status. */
function knownMemberNames(o: Observation): Set<string> {
  const status = o.cluster.status?.members;
  const names = [...(status?.ready ?? []), ...(status?.unready ?? [])];
  for (const member of o.localMembers ?? []) {
    const pod = memberPodName(member);
    if (pod) names.push(pod);
  }
  return new Set(names);
}

/** Claims of `members` that survive (not being deleted) while their member's pod is gone. */
function claimsWithoutPods(o: Observation, members: Set<string>): ClaimView[] {
  const podNames = new Set(o.pods.map((p) => p.name));
  return (o.claims ?? []).filter((c) => !c.terminating && members.has(c.member) && !podNames.has(c.member));
}

export function planNextStep(o: Observation): Step {
  if (!o.services.peer || !o.services.client || o.services.budget === false) {
    // A cluster about to be seeded gets its Services in the seed step itself (one step, not two).
    const next = o.recovery ? undefined : planMembers(o);
    return next?.kind === "seed" ? next : { kind: "ensure-services" };
  }
  if (o.recovery) return planRecovery(o, o.recovery);
  return planMembers(o);
}

/** The next step for the members when no quorum recovery is under way. */
function planMembers(o: Observation): Step {
  const live = o.pods.filter((p) => !p.terminating);
  const liveByName = new Map(live.map((p) => [p.name, p]));

  if (o.members === undefined) {
    // Members whose pods are gone but whose data survives come back before anything else is decided.
    const returning = claimsWithoutPods(o, knownMemberNames(o));
    if (returning[0]) return { kind: "restart-member", name: returning[0].member };
    if (live.length === 0) {
      if (o.pods.length > 0) return wait("PodsTerminating", "waiting for old member pods to terminate", 1000);
      return o.hadMembers ? { kind: "all-members-lost" } : { kind: "seed" };
    }
    // Only a cluster that never formed may finish its bootstrap: re-creating a member of a formed
    // cluster with --initial-cluster-state=new would start a second, empty cluster.
    const planned = o.hadMembers ? [] : (live.find((p) => p.bootstrap)?.bootstrap ?? []);
    const missing = planned.filter((name) => !o.pods.some((p) => p.name === name));
    if (missing.length > 0) return { kind: "seed", names: planned };
    // A formed cluster whose quorum is gone for good (most voters' pods deleted) is rebuilt.
    const localVoters = (o.localMembers ?? []).filter((m) => !m.isLearner);
    const recovery =
      o.hadMembers && localVoters.length > 0 ? recoveryFromSurvivor(o, localVoters) : undefined;
    if (recovery) return recovery;
    const youngest = Math.max(...live.map((p) => p.createdAtMs));
    if (o.nowMs - youngest < STARTUP_GRACE_MS) {
      return wait("MembersStarting", `waiting for etcd to answer on ${live.length} member pod(s)`, 1000);
    }
    return { kind: "quorum-lost", message: `none of ${live.length} member pod(s) answers etcd requests` };
  }

  const members = o.members;
  const voters = members.filter((m) => !m.isLearner);
  const healthyVoters = voters.filter((m) => {
    const pod = memberPodName(m);
    return pod !== undefined && liveByName.has(pod) && isHealthy(o, pod);
  });

  // 4. Added to etcd, pod never created: finish the add.
  for (const member of members) {
    const pod = memberPodName(member);
    if (!member.name && pod && !liveByName.has(pod) && !o.pods.some((p) => p.name === pod)) {
      return { kind: "create-member-pod", name: pod, memberId: member.id };
    }
  }

  // 5. A started member whose pod is gone: back on its volume; else remove it, if quorum allows.
  const returning = claimsWithoutPods(o, new Set(members.map(memberPodName).filter((n) => n !== undefined)));
  if (returning[0]) return { kind: "restart-member", name: returning[0].member };
  for (const member of members) {
    const pod = memberPodName(member);
    if (!member.name || (pod && liveByName.has(pod))) continue;
    if (o.claims?.some((c) => c.member === pod && !c.terminating)) {
      // Its old pod is still terminating; the member comes back on its volume once it is gone.
      return wait(
        "MemberRestarting",
        `waiting for the old pod of member ${pod} to go before it restarts`,
        1000,
      );
    }
    const remainingVoters = member.isLearner ? voters.length : voters.length - 1;
    if (healthyVoters.length >= majority(remainingVoters) || member.isLearner) {
      return { kind: "remove-member", name: pod ?? member.id, memberId: member.id, reason: "dead" };
    }
    return (
      recoveryFromSurvivor(o, voters) ?? {
        kind: "quorum-lost",
        message: `member ${pod ?? member.id} is gone and only ${healthyVoters.length} of ${voters.length} voting members are healthy`,
      }
    );
  }

  // 6. Pods that are no member.
  const memberPods = new Set(members.map(memberPodName));
  for (const pod of live) {
    if (!memberPods.has(pod.name))
      return { kind: "delete-pod", name: pod.name, reason: "it is not a member of the etcd cluster" };
  }

  // 6b. Claims of members that are no more (removed, or replaced after their data went bad).
  for (const claim of o.claims ?? []) {
    if (!claim.terminating && !memberPods.has(claim.member) && !liveByName.has(claim.member)) {
      return { kind: "delete-claim", name: claim.name, member: claim.member };
    }
  }

  // 7. Learners: promote once they answer; one whose pod ended is removed (a learner holds no
  // vote). etcd refuses to promote a learner that lags the leader, so the promotion is tried as
  // soon as the learner answers with a leader, not up to a readiness period later when its pod
  // turns Ready.
  for (const learner of members.filter((m) => m.isLearner)) {
    const pod = memberPodName(learner);
    const view = liveByName.get(pod ?? "");
    const status = o.health.get(pod ?? "");
    const following = status?.ok === true && (status.leaderId ?? "0") !== "0";
    if (pod && view && !podEnded(view) && isHealthy(o, pod) && (view.ready || following)) {
      return { kind: "promote-member", name: pod, memberId: learner.id };
    }
    if (view && podEnded(view)) {
      return { kind: "remove-member", name: view.name, memberId: learner.id, reason: "dead" };
    }
    return wait("MemberStarting", `waiting for new member ${pod ?? learner.id} to start and catch up`, 500);
  }

  // NOSPACE: writes are refused until the space is recovered; members out of space still answer.
  const outOfSpace = members.flatMap((m) => {
    const pod = memberPodName(m);
    return pod && raisedAlarms(o.health.get(pod)).includes(NOSPACE) ? [pod] : [];
  });
  if (outOfSpace.length > 0 && healthyVoters.length >= majority(voters.length)) {
    // The live data filled the quota at the last try: compacting and defragmenting again (every
    // member blocked in turn) only helps once the store changed, i.e. keys were deleted.
    const last = o.cluster.status?.lastSpaceRecovery;
    if (last?.result === "StillFull" && last.revision === newestRevision(o)) {
      return wait(
        "NoSpace",
        "the live data alone fills the space quota: delete keys or raise spec.maintenance.quotaBackendBytes",
        10_000,
      );
    }
    return { kind: "recover-space", members: outOfSpace.sort() };
  }

  // 8. A voter unhealthy for too long, or whose pod ended, is replaced if quorum allows; otherwise
  // never scale while a voter is unhealthy.
  if (healthyVoters.length < voters.length) {
    const grace = o.unhealthyGraceMs ?? DEFAULT_UNHEALTHY_GRACE_MS;
    const stuck = voters.flatMap((member) => {
      const pod = liveByName.get(memberPodName(member) ?? "");
      const given = pod && !isHealthy(o, pod.name) && (podEnded(pod) || (pod.notReadyForMs ?? 0) > grace);
      return given ? [{ member, pod }] : [];
    })[0];
    const claimed = stuck && o.claims?.some((c) => c.member === stuck.pod.name && !c.terminating);
    if (stuck && podEnded(stuck.pod) && claimed) {
      // On a volume, the member comes back as itself: its pod goes, and rule 5 starts it again.
      return {
        kind: "delete-pod",
        name: stuck.pod.name,
        reason: `its pod is ${stuck.pod.phase} and will not run again; the member restarts on its volume`,
      };
    }
    if (stuck && healthyVoters.length >= majority(voters.length - 1)) {
      return { kind: "remove-member", name: stuck.pod.name, memberId: stuck.member.id, reason: "dead" };
    }
    const sick = voters.map(memberPodName).filter((p) => p && !isHealthy(o, p));
    return wait("MemberUnhealthy", `waiting for member(s) ${sick.join(", ")} to become healthy`, 1000);
  }

  // 9. Upgrade.
  const upgrade = planUpgrade(o, voters);
  if (upgrade) return upgrade;

  // 10. Certificate rotation.
  const rotation = planRotation(o, voters);
  if (rotation) return rotation;

  // 11. Scale.
  if (voters.length < o.spec.size) {
    // Mid-upgrade (or with an upgrade refused), a new member joins at the version the cluster runs.
    const running = voters
      .map((m) => o.pods.find((p) => p.name === memberPodName(m))?.version)
      .filter((v): v is string => v !== undefined)
      .sort(compareVersions)[0];
    return running && compareVersions(running, o.spec.version) < 0
      ? { kind: "add-member", version: running }
      : { kind: "add-member" };
  }
  if (voters.length > o.spec.size) {
    const leader = leaderId(o);
    const follower = voters.find((m) => m.id !== leader);
    if (!follower) return wait("NoFollower", "no follower to remove", 1000);
    if (healthyVoters.length - 1 < majority(voters.length - 1)) {
      return wait("QuorumAtRisk", "removing a member now would leave too few healthy members", 1000);
    }
    return {
      kind: "remove-member",
      name: memberPodName(follower) ?? follower.id,
      memberId: follower.id,
      reason: "scale-down",
    };
  }

  // 12. Defragmentation.
  return planDefragmentation(o, voters) ?? { kind: "steady" };
}

/**
 * The next member to defragment, if any: reached only with every voter healthy, at full strength,
 * with nothing else to do. A defragmentation blocks its member, so followers go first (most free
 * space first) and the leader last, once leadership moved to a member already done.
 */
function planDefragmentation(o: Observation, voters: MemberInfo[]): Step | undefined {
  const settings = o.spec.maintenance.defragmentation;
  if ((!settings.enabled && !settings.schedule) || voters.length !== o.spec.size) return undefined;
  const last = o.cluster.status?.lastDefragmentation;
  const recentlyDone = (pod: string) =>
    last?.member === pod && o.nowMs - Date.parse(last.finishedAt) < DEFRAG_COOLDOWN_MS;
  // The schedule's latest time: a member that existed then and was not defragmented since is due.
  const scheduledAt = settings.schedule ? previousCronTime(settings.schedule, o.nowMs) : undefined;
  const doneAt = o.cluster.status?.memberDefragmentations ?? {};
  const dueBySchedule = (pod: string) => {
    if (scheduledAt === undefined) return false;
    const created = o.pods.find((p) => p.name === pod)?.createdAtMs ?? o.nowMs;
    return created <= scheduledAt && !(Date.parse(doneAt[pod] ?? "") >= scheduledAt);
  };
  const candidates = voters
    .flatMap((member) => {
      const pod = memberPodName(member);
      const status = pod ? o.health.get(pod) : undefined;
      if (!pod || !status?.ok) return [];
      const share = fragmentedPercent(status);
      const size = status.dbSize ?? 0;
      const overThreshold =
        settings.enabled &&
        !recentlyDone(pod) &&
        size >= settings.minimumBytes &&
        share >= settings.thresholdPercent;
      return overThreshold || dueBySchedule(pod) ? [{ member, pod, size, share }] : [];
    })
    .sort((a, b) => b.share - a.share);
  if (candidates.length === 0) return undefined;
  const leader = leaderId(o);
  const next = candidates.find((c) => c.member.id !== leader) ?? candidates[0];
  if (!next) return undefined;
  if (next.member.id === leader && voters.length > 1) {
    // Hand leadership to the member with the least free space (done already, or not due).
    const successor = voters
      .filter((m) => m.id !== leader)
      .sort(
        (a, b) =>
          fragmentedPercent(o.health.get(memberPodName(a) ?? "")) -
          fragmentedPercent(o.health.get(memberPodName(b) ?? "")),
      )[0];
    if (successor) {
      return {
        kind: "move-leader",
        fromId: next.member.id,
        toId: successor.id,
        toName: memberPodName(successor) ?? successor.id,
        reason: "the leader is defragmented last, as a follower",
      };
    }
  }
  return {
    kind: "defragment-member",
    name: next.pod,
    memberId: next.member.id,
    dbSize: next.size,
    fragmentedPercent: Math.round(next.share),
  };
}

/**
 * Members created with other certificates than the Secrets hold now are replaced one at a time:
 * first a new member (a learner, with the new certificates; it counts towards quorum only once
 * promoted), then, with one voter too many, a member on the old ones is removed: a follower, or
 * the leader last after leadership moved to a member on the new ones. Replacement rather than a
 * restart in place, because a pod's volumes cannot change and etcd reads trusted CAs only at
 * start. Reached only when every voter is healthy and no learner is pending (rules 7 and 8), so
 * quorum never rests on a member being replaced.
 */
function planRotation(o: Observation, voters: MemberInfo[]): Step | undefined {
  const hash = o.tls?.hash;
  if (hash === undefined) return undefined;
  const byName = new Map(o.pods.map((p) => [p.name, p]));
  const stale = voters.filter((m) => byName.get(memberPodName(m) ?? "")?.tlsHash !== hash);
  if (stale.length === 0) return undefined;
  if (voters.length <= o.spec.size) return { kind: "add-member", reason: "tls-rotation" };
  const leader = leaderId(o);
  const follower = stale.find((m) => m.id !== leader);
  if (follower) {
    return {
      kind: "remove-member",
      name: memberPodName(follower) ?? follower.id,
      memberId: follower.id,
      reason: "tls-rotation",
    };
  }
  const current = voters.find((m) => !stale.includes(m));
  const target = stale[0];
  if (!current || !target) return undefined;
  return {
    kind: "move-leader",
    fromId: target.id,
    toId: current.id,
    toName: memberPodName(current) ?? current.id,
    reason: "the leader's certificates are replaced last",
  };
}

/**
 * In-place upgrades that are refused outright (none today; the webhook shares this list). From 3.6
 * to 3.7 the old log must be drained first (see the drain-old-log step).
 */
export const IN_PLACE_BLOCKED: { from: string; to: string; message: string }[] = [];

function planUpgrade(o: Observation, voters: MemberInfo[]): Step | undefined {
  const byName = new Map(o.pods.map((p) => [p.name, p]));
  const podOf = (m: MemberInfo) => byName.get(memberPodName(m) ?? "");
  const versions = voters.map((m) => podOf(m)?.version).filter((v): v is string => v !== undefined);
  if (versions.length === 0) return undefined;
  const lowest = [...versions].sort(compareVersions)[0] ?? o.spec.version;
  const highest = [...versions].sort(compareVersions).at(-1) ?? o.spec.version;
  if (compareVersions(highest, o.spec.version) > 0) {
    // A cluster (or part of it) past spec.version: refused, untouched, unless explicitly allowed.
    if (o.allowDowngrade) return planDowngrade(o, voters, highest);
    return {
      kind: "version-refused",
      message:
        `spec.version ${o.spec.version} is older than the running ${highest}: downgrades are not done automatically; ` +
        `to downgrade one minor version with etcd's downgrade procedure, annotate the cluster ${ALLOW_DOWNGRADE_ANNOTATION}="true"`,
    };
  }
  const path = upgradePath(lowest, o.spec.version);
  if (!path.ok) return { kind: "version-refused", message: path.message };
  const phase = path.steps[0];
  // A lost member is replaced first: its replacement runs spec.version like every member, so the
  // version's raise does not concern it, and a new cluster's version is only decided a few seconds
  // after it forms (a member lost then waited those seconds for nothing).
  if (!phase) return voters.length < o.spec.size ? undefined : clusterVersionPending(o);
  const blocked = IN_PLACE_BLOCKED.find((b) => minorOf(lowest) === b.from && minorOf(phase) === b.to);
  if (blocked) return { kind: "version-refused", message: blocked.message };
  // The member upgraded last must run its new version before the next one goes.
  for (const m of voters) {
    const pod = podOf(m);
    const running = o.health.get(pod?.name ?? "")?.version;
    if (pod?.version && running && running !== pod.version) {
      return wait(
        "MemberUpgrading",
        `waiting for ${pod.name} to run etcd ${pod.version} (runs ${running})`,
        1000,
      );
    }
  }
  // Entering a new minor needs etcd to have raised the cluster version to the current one first
  // (it does so a few seconds after the last member upgraded): a member of the next minor that
  // meets entries still written in the older format cannot apply them.
  if (
    minorOf(phase) !== minorOf(lowest) &&
    (!o.clusterVersion || minorOf(o.clusterVersion) !== minorOf(lowest))
  ) {
    return wait(
      "ClusterVersionPending",
      `waiting for etcd to raise the cluster version to ${minorOf(lowest)} (now ${o.clusterVersion ?? "unknown"}) before upgrading to ${phase}`,
      1000,
    );
  }
  const behind = voters.filter((m) => compareVersions(podOf(m)?.version ?? phase, phase) < 0);
  if (behind.length === 0) return undefined;
  // etcd 3.7 cannot apply log entries written before 3.6 (v2 requests): a member restarted on 3.7
  // replays its log from its last snapshot, so every member must first snapshot past them.
  if (minorOf(lowest) === "3.6" && minorOf(phase) === "3.7" && !o.oldLogDrained)
    return { kind: "drain-old-log" };
  return changeNextMember(o, voters, behind, phase);
}

/**
 * Every member runs spec.version: the upgrade is over only once etcd raised its cluster version to
 * that minor (its leader does so a few seconds after the last member upgraded). Until then the
 * cluster still answers with the old cluster version, and a downgrade asked for in that window
 * would read "cluster version = target minor" as "downgrade already enabled" and replace members
 * without etcd's procedure, racing the leader that raises the version meanwhile (a member on the
 * older release then cannot start: "cluster cannot be downgraded"). An unknown cluster version
 * (not decided yet) does not hold a cluster up.
 */
function clusterVersionPending(o: Observation): Step | undefined {
  const cluster = o.clusterVersion;
  if (!cluster || compareVersions(`${minorOf(cluster)}.0`, `${minorOf(o.spec.version)}.0`) >= 0)
    return undefined;
  return wait(
    "ClusterVersionPending",
    `every member runs etcd ${o.spec.version}; waiting for etcd to raise the cluster version to ${minorOf(o.spec.version)} ` +
      `(now ${cluster}; a downgrade enabled earlier keeps it there until "etcdctl downgrade cancel")`,
    1000,
  );
}

/**
 * An explicitly allowed downgrade, with etcd's procedure: enable it (the leader lowers the cluster
 * and storage versions), then replace members' images one at a time, followers first.
 */
function planDowngrade(o: Observation, voters: MemberInfo[], highest: string): Step | undefined {
  const target = o.spec.version;
  const problem = downgradeProblem(highest, target);
  if (problem) return { kind: "version-refused", message: problem };
  const byName = new Map(o.pods.map((p) => [p.name, p]));
  const podOf = (m: MemberInfo) => byName.get(memberPodName(m) ?? "");
  for (const m of voters) {
    const pod = podOf(m);
    const running = o.health.get(pod?.name ?? "")?.version;
    if (pod?.version && running && running !== pod.version) {
      return wait(
        "MemberDowngrading",
        `waiting for ${pod.name} to run etcd ${pod.version} (runs ${running})`,
        1000,
      );
    }
  }
  if (!o.clusterVersion || minorOf(o.clusterVersion) !== minorOf(target)) {
    return { kind: "enable-downgrade", target };
  }
  const ahead = voters.filter((m) => compareVersions(podOf(m)?.version ?? target, target) > 0);
  if (ahead.length === 0) return undefined;
  return changeNextMember(o, voters, ahead, target);
}

/** The next member to move to `phase`: a follower, or the leader last after handing leadership on. */
function changeNextMember(
  o: Observation,
  voters: MemberInfo[],
  behind: MemberInfo[],
  phase: string,
): Step | undefined {
  // A rolling change takes a member down on purpose: only at full strength. With a voter lost
  // (and removed), one member restarting would leave exactly a majority, or less; the scale rule
  // replaces the lost member first.
  if (voters.length < o.spec.size) return undefined;
  const byName = new Map(o.pods.map((p) => [p.name, p]));
  const podOf = (m: MemberInfo) => byName.get(memberPodName(m) ?? "");
  const leader = leaderId(o);
  const follower = behind.find((m) => m.id !== leader);
  const target = follower ?? behind[0];
  if (!target) return undefined;
  if (!follower && voters.length > 1) {
    const upgraded = voters.find((m) => m.id !== target.id && podOf(m)?.version === phase);
    if (upgraded) {
      return {
        kind: "move-leader",
        fromId: target.id,
        toId: upgraded.id,
        toName: memberPodName(upgraded) ?? upgraded.id,
        reason: `the leader is upgraded last`,
      };
    }
  }
  return {
    kind: "upgrade-member",
    name: memberPodName(target) ?? target.id,
    memberId: target.id,
    from: podOf(target)?.version ?? "",
    to: phase,
  };
}

function wait(reason: string, message: string, afterMs: number): Step {
  return { kind: "wait", reason, message, afterMs };
}

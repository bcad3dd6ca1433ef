// The reconcile function: re-read the world for one EtcdCluster (CR, pods, Services, etcd's
// member list and health), pick ONE next step with the planner, run it, and write status.
// Level-triggered and stateless: the job carries only which cluster; running it twice is harmless.
import { isDeepStrictEqual } from "node:util";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import {
  ALLOW_DOWNGRADE_ANNOTATION,
  type ClusterCondition,
  clusterNameProblem,
  type EtcdCluster,
  type EtcdClusterStatus,
  type NormalizedSpec,
  OLD_LOG_DRAINED_ANNOTATION,
  RECOVERY_ANNOTATION,
  RESTORE_ANNOTATION,
} from "../shared/api/etcd-cluster.ts";
import { validateEtcdClusterSpec } from "../shared/api/validate-etcd-cluster.ts";
import { type Condition, setCondition } from "../shared/conditions.ts";
import { fetchClusterVersion } from "../shared/etcd-http.ts";
import { NOSPACE, raisedAlarms } from "../shared/etcd-maintenance.ts";
import { type EndpointStatus, endpointStatuses, listMembers } from "../shared/etcd-members.ts";
import { memberSelector } from "../shared/kube.ts";
import { apiErrorMessage } from "../shared/kube-errors.ts";
import {
  BOOTSTRAP_ANNOTATION,
  CLIENT_PORT,
  clientServiceName,
  MEMBER_LABEL,
  memberNameOfClaim,
  VERSION_ANNOTATION,
} from "../shared/member-pods.ts";
import { clientTlsOn, problemKey, TLS_HASH_ANNOTATION } from "../shared/member-tls.ts";
import {
  loadClusterTls,
  type MemberTlsMaterial,
  memberMaterial,
  type OperatorTlsSource,
} from "../shared/tls-secrets.ts";
import { addMember, createMemberPod } from "./add-member.ts";
import { defragmentOne, recoverSpace } from "./defragment.ts";
import { drainOldLog } from "./drain-old-log.ts";
import { enableDowngrade } from "./enable-downgrade.ts";
import { ensureServices } from "./ensure-services.ts";
import { deleteMemberClaim, restartMember } from "./member-volumes.ts";
import {
  type ClaimView,
  majority,
  memberPodName,
  type Observation,
  type PodView,
  planNextStep,
  type Step,
} from "./plan.ts";
import { promoteMember } from "./promote-member.ts";
import {
  abortRecovery,
  createRecoverySeed,
  finishRecovery,
  parseRecoveryMark,
  startRecovery,
} from "./recover-quorum.ts";
import { deleteMemberPod, removeMember } from "./remove-member.ts";
import { restoreFromLatestBackup } from "./restore-from-backup.ts";
import { seed } from "./seed.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";
import { moveLeader, upgradeMember } from "./upgrade-member.ts";

export interface ReconcileInput {
  namespace: string;
  name: string;
  /**
   * Read the EtcdCluster at this resourceVersion or newer (the API server's watch cache) instead of
   * a quorum read: the operator's read floor for it (shared/read-floor.ts).
   */
  notOlderThan?: string;
}

export type ReconcileResult =
  | { kind: "gone" }
  | { kind: "invalid"; problems: string[] }
  | { kind: "paused" }
  | { kind: "restoring" }
  /** Nothing may be built: a TLS Secret is missing or invalid. Looked at again after requeueAfterMs. */
  | { kind: "blocked"; reason: string; problems: string[]; requeueAfterMs: number }
  | {
      kind: "step";
      step: Step;
      outcome: StepOutcome;
      /**
       * Every member's Status when the cluster is steady and quick looks may stand in for the next
       * full ones (shared/look.ts): not with client TLS (its Secrets are read on every full look)
       * nor with a defragmentation schedule (its times come from the full look's planner).
       */
      steadyStatuses?: EndpointStatus[];
    };

function podView(pod: V1Pod, nowMs: number): PodView {
  const readyCondition = pod.status?.conditions?.find((c) => c.type === "Ready");
  const ready = readyCondition?.status === "True";
  const since = readyCondition?.lastTransitionTime ?? pod.metadata?.creationTimestamp;
  return {
    notReadyForMs: ready || !since ? 0 : nowMs - new Date(since).getTime(),
    name: pod.metadata?.name ?? "",
    ip: pod.status?.podIP,
    phase: pod.status?.phase ?? "Pending",
    ready,
    terminating: pod.metadata?.deletionTimestamp !== undefined,
    createdAtMs: pod.metadata?.creationTimestamp ? new Date(pod.metadata.creationTimestamp).getTime() : 0,
    bootstrap: pod.metadata?.annotations?.[BOOTSTRAP_ANNOTATION]?.split(",").filter(Boolean),
    version: pod.metadata?.annotations?.[VERSION_ANNOTATION],
    tlsHash: pod.metadata?.annotations?.[TLS_HASH_ANNOTATION],
  };
}

function claimView(claim: V1PersistentVolumeClaim): ClaimView[] {
  const name = claim.metadata?.name ?? "";
  const member = claim.metadata?.labels?.[MEMBER_LABEL] ?? memberNameOfClaim(name);
  return member ? [{ name, member, terminating: claim.metadata?.deletionTimestamp !== undefined }] : [];
}

export async function observe(
  cluster: EtcdCluster,
  spec: NormalizedSpec,
  deps: StepDeps,
  memberTls?: MemberTlsMaterial,
): Promise<Observation> {
  const namespace = cluster.metadata?.namespace ?? "default";
  const name = cluster.metadata?.name ?? "";
  const [pods, peer, client, minAvailable, claims] = await Promise.all([
    deps.kube.listMemberPods(namespace, name),
    deps.kube.peerServiceUsable(namespace, name),
    deps.kube.serviceExists(namespace, clientServiceName(name)),
    deps.kube.budgetMinAvailable(namespace, name),
    // Listed before the member list is read: a claim is made after its member is added to etcd,
    // so every claim seen here belongs to a member that list will show (or to one that is gone).
    spec.pod.persistentVolumeClaimSpec ? deps.kube.listMemberClaims(namespace, name) : undefined,
  ]);
  const nowMs = Date.now();
  const views = pods.map((pod) => podView(pod, nowMs));
  const reachable = views.filter((p) => p.ip && !p.terminating);
  const statuses = await endpointStatuses(
    reachable.map((p) => `http://${p.ip}:${CLIENT_PORT}`),
    deps.etcd,
  );
  const health = new Map<string, EndpointStatus>();
  reachable.forEach((p, i) => {
    const status = statuses[i];
    if (status) health.set(p.name, status);
  });
  const answering = statuses.filter((s) => s.ok).map((s) => s.endpoint);
  // The cluster version is asked for while the member list is read: neither needs the other.
  const clusterVersionRead = answering[0] ? fetchClusterVersion(answering[0], deps.etcd) : undefined;
  let members: Observation["members"];
  if (answering.length > 0) {
    try {
      members = await listMembers(answering, deps.etcd);
    } catch (error) {
      deps.log.warn({ err: error }, "member list failed");
    }
  }
  const previous = cluster.status?.members;
  const hadMembers = (previous?.ready?.length ?? 0) + (previous?.unready?.length ?? 0) > 0;
  // Without a leader the list can only be read from each member's own copy; the planner uses it
  // only to decide whether quorum is lost for good.
  const localMembers =
    members === undefined && hadMembers && answering.length > 0
      ? await listMembers(answering, { ...deps.etcd, serializable: true }).catch(() => undefined)
      : undefined;
  const clusterVersion = await clusterVersionRead;
  return {
    clusterVersion,
    unhealthyGraceMs: deps.unhealthyGraceMs,
    nowMs: Date.now(),
    cluster,
    spec,
    pods: views,
    services: {
      peer,
      client,
      budget: minAvailable === majority(spec.size),
    },
    members,
    claims: claims?.flatMap((claim) => claimView(claim)),
    health,
    hadMembers,
    localMembers,
    oldLogDrained: cluster.metadata?.annotations?.[OLD_LOG_DRAINED_ANNOTATION] === "true",
    allowDowngrade: cluster.metadata?.annotations?.[ALLOW_DOWNGRADE_ANNOTATION] === "true",
    recovery: parseRecoveryMark(cluster.metadata?.annotations?.[RECOVERY_ANNOTATION]),
    tls: memberTls ? { hash: memberTls.hash } : undefined,
  };
}

async function runStep(step: Step, input: StepInput, deps: StepDeps): Promise<StepOutcome> {
  switch (step.kind) {
    case "ensure-services":
      return ensureServices(input, deps);
    case "seed":
      return seed(input, deps, step.names);
    case "add-member":
      return addMember(
        step.version ? { ...input, spec: { ...input.spec, version: step.version } } : input,
        deps,
        step.reason,
      );
    case "create-member-pod":
      return createMemberPod(input, deps, step.name);
    case "promote-member":
      return promoteMember(input, deps, step.name, step.memberId);
    case "remove-member":
      return removeMember(input, deps, step.name, step.memberId, step.reason);
    case "delete-pod":
      return deleteMemberPod(input, deps, step.name, step.reason);
    case "restart-member":
      return restartMember(input, deps, step.name);
    case "delete-claim":
      return deleteMemberClaim(input, deps, step.name, step.member);
    case "wait":
      return { requeueAfterMs: step.afterMs };
    case "quorum-lost":
      return {
        requeueAfterMs: 5_000,
        event: { type: "Warning", reason: "QuorumLost", message: step.message },
      };
    case "all-members-lost":
      return restoreFromLatestBackup(input, deps);
    case "recover-from-member":
      return startRecovery(input, deps, step.survivor, step.appliedIndex, step.lost, step.voters);
    case "create-recovery-seed":
      return createRecoverySeed(input, deps, step.seed, step.survivorIp);
    case "finish-recovery":
      return finishRecovery(input, deps, step.seed, step.survivor);
    case "abort-recovery":
      return abortRecovery(input, deps, step.message);
    case "upgrade-member":
      return upgradeMember(input, deps, step.name, step.from, step.to);
    case "drain-old-log":
      return drainOldLog(input, deps);
    case "enable-downgrade":
      return enableDowngrade(input, deps, step.target);
    case "move-leader":
      return moveLeader(input, deps, step.toId, step.toName, step.reason);
    case "version-refused":
      return { event: { type: "Warning", reason: "VersionRefused", message: step.message } };
    case "recover-space":
      return recoverSpace(input, deps, step.members);
    case "defragment-member":
      return defragmentOne(input, deps, step.name, step.dbSize, step.fragmentedPercent);
    case "steady":
      return {};
  }
}

const PROGRESS_REASON: Record<Step["kind"], string> = {
  "ensure-services": "CreatingServices",
  seed: "Seeding",
  "add-member": "AddingMember",
  "create-member-pod": "AddingMember",
  "promote-member": "PromotingMember",
  "remove-member": "RemovingMember",
  "delete-pod": "CleaningUp",
  "restart-member": "RestartingMember",
  "delete-claim": "CleaningUp",
  wait: "Waiting",
  "quorum-lost": "QuorumLost",
  "all-members-lost": "AllMembersLost",
  "recover-from-member": "RecoveringQuorum",
  "create-recovery-seed": "RecoveringQuorum",
  "finish-recovery": "QuorumRecovered",
  "abort-recovery": "QuorumRecoveryFailed",
  "upgrade-member": "UpgradingMember",
  "move-leader": "MovingLeader",
  "drain-old-log": "DrainingOldLog",
  "enable-downgrade": "EnablingDowngrade",
  "version-refused": "VersionRefused",
  "recover-space": "NoSpace",
  "defragment-member": "Defragmenting",
  steady: "Stable",
};

const OWN_CONDITIONS = new Set(["Available", "Progressing", "Degraded", "NoSpace"]);

function stepMessage(step: Step, outcome: StepOutcome): string {
  if (step.kind === "wait" || step.kind === "quorum-lost") return step.message;
  return outcome.event?.message ?? PROGRESS_REASON[step.kind];
}

/** The status a step leaves behind; readable with `kubectl get etcd` and `kubectl describe`. */
export function clusterStatus(
  o: Observation,
  step: Step,
  outcome: StepOutcome,
  now: Date,
): EtcdClusterStatus {
  const cluster = o.cluster;
  const name = cluster.metadata?.name ?? "";
  const namespace = cluster.metadata?.namespace ?? "default";
  const previous = cluster.status ?? {};
  const generation = cluster.metadata?.generation;
  const members = o.members ?? [];
  const voters = members.filter((m) => !m.isLearner);
  const podNames = members.map(memberPodName).filter((n): n is string => n !== undefined);
  const ready = podNames.filter((n) => o.health.get(n)?.ok === true).sort();
  const unready = podNames.filter((n) => o.health.get(n)?.ok !== true).sort();
  const healthyVoters = voters.filter((m) => {
    const pod = memberPodName(m);
    return pod !== undefined && o.health.get(pod)?.ok === true;
  }).length;
  const versions = [...o.health.values()].flatMap((s) => (s.ok && s.version ? [s.version] : [])).sort();
  const available = voters.length > 0 && healthyVoters >= majority(voters.length);
  const failed = step.kind === "all-members-lost";
  const recovering =
    o.recovery !== undefined || step.kind === "recover-from-member" || step.kind === "abort-recovery";
  const outOfSpace =
    outcome.spaceRecovery?.result === "Recovered"
      ? []
      : [...o.health.entries()]
          .flatMap(([pod, s]) => (raisedAlarms(s).includes(NOSPACE) ? [pod] : []))
          .sort();
  const degraded =
    failed ||
    recovering ||
    outOfSpace.length > 0 ||
    step.kind === "quorum-lost" ||
    step.kind === "version-refused";

  // Conditions of other writers (coreos's Scaling, Recovering, Upgrading) would stay as they were
  // left for ever, telling of work long over: the three this operator keeps are the status.
  let conditions = previous.conditions?.filter((c) => OWN_CONDITIONS.has(c.type));
  conditions = setCondition(
    conditions,
    {
      type: "Available",
      status: available ? "True" : "False",
      reason: available ? "QuorumHealthy" : o.members === undefined ? "NoMemberAnswers" : "QuorumUnhealthy",
      message: available
        ? `${healthyVoters} of ${voters.length} voting members healthy`
        : `${healthyVoters} of ${voters.length} voting members healthy; a majority is needed`,
      observedGeneration: generation,
    },
    now,
  );
  const progressing = step.kind !== "steady" && !failed;
  conditions = setCondition(
    conditions,
    {
      type: "Progressing",
      status: progressing ? "True" : "False",
      reason: PROGRESS_REASON[step.kind],
      message: progressing
        ? stepMessage(step, outcome)
        : `cluster has ${voters.length} of ${o.spec.size} members`,
      observedGeneration: generation,
    },
    now,
  );
  conditions = setCondition(
    conditions,
    {
      type: "Degraded",
      status: degraded ? "True" : "False",
      reason: degraded ? (outOfSpace.length > 0 ? "NoSpace" : PROGRESS_REASON[step.kind]) : "AsExpected",
      message: degraded ? (outcome.event?.message ?? stepMessage(step, outcome)) : "no known problem",
      observedGeneration: generation,
    },
    now,
  );
  conditions = noSpaceCondition(conditions, outOfSpace, generation, now);
  const phase = failed
    ? "Failed"
    : step.kind === "steady" || previous.phase === "Running"
      ? "Running"
      : "Creating";
  return {
    phase,
    reason: failed ? "AllMembersLost" : "",
    controlPaused: false,
    conditions,
    size: o.members ? voters.length : (previous.size ?? 0),
    readyMembers: ready.length,
    members: o.members ? { ready, unready } : previous.members,
    serviceName: clientServiceName(name),
    clientPort: CLIENT_PORT,
    clientURL: `${clientTlsOn(o.spec) ? "https" : "http"}://${clientServiceName(name)}.${namespace}.svc:${CLIENT_PORT}`,
    selector: memberSelector(name),
    // Only set while members run another version than the spec asks for (an upgrade in progress).
    targetVersion: versions.length > 0 && versions.some((v) => v !== o.spec.version) ? o.spec.version : "",
    currentVersion: versions[0] ?? previous.currentVersion ?? "",
    memberVersions: Object.fromEntries(
      [...o.health.entries()].flatMap(([pod, s]) => (s.ok && s.version ? [[pod, s.version]] : [])).sort(),
    ),
    observedGeneration: generation,
    lastDefragmentation: outcome.defragmented?.at(-1) ?? previous.lastDefragmentation,
    memberDefragmentations: memberDefragmentations(
      podNames,
      previous.memberDefragmentations,
      outcome.defragmented,
    ),
    lastSpaceRecovery: outcome.spaceRecovery ?? previous.lastSpaceRecovery,
  };
}

/** When each current member was last defragmented: the previous record, plus this step's, less members gone. */
function memberDefragmentations(
  members: string[],
  previous: Record<string, string> | undefined,
  done: { member: string; finishedAt: string }[] | undefined,
): Record<string, string> | undefined {
  const record: Record<string, string> = {};
  for (const member of members) {
    const at = done?.findLast((d) => d.member === member)?.finishedAt ?? previous?.[member];
    if (at) record[member] = at;
  }
  return Object.keys(record).length > 0 ? record : undefined;
}

/**
 * NoSpace: True from the first look that saw a member's NOSPACE alarm (its lastTransitionTime says
 * since when writes are refused), False once the alarm is gone, saying for how long they were.
 * Absent for a cluster that never ran out of space.
 */
function noSpaceCondition(
  conditions: ClusterCondition[],
  outOfSpace: string[],
  generation: number | undefined,
  now: Date,
): ClusterCondition[] {
  const previous = conditions.find((c) => c.type === "NoSpace");
  if (outOfSpace.length > 0) {
    return setCondition(
      conditions,
      {
        type: "NoSpace",
        status: "True",
        reason: "QuotaReached",
        message:
          `etcd refuses writes: member(s) ${outOfSpace.join(", ")} raised ${NOSPACE} (the database reached its ` +
          "space quota); reads and deletes still work, and the operator compacts, defragments and disarms",
        observedGeneration: generation,
      },
      now,
    );
  }
  if (previous?.status !== "True") return conditions;
  const since = previous.lastTransitionTime ?? now.toISOString();
  const seconds = Math.round((now.getTime() - Date.parse(since)) / 1000);
  return setCondition(
    conditions,
    {
      type: "NoSpace",
      status: "False",
      reason: "SpaceRecovered",
      message: `writes were refused from ${since} to ${now.toISOString()} (${seconds} s); accepted again`,
      observedGeneration: generation,
    },
    now,
  );
}

function simpleStatus(
  cluster: EtcdCluster,
  now: Date,
  condition: Omit<Condition, "lastTransitionTime" | "lastUpdateTime">,
  extra: Partial<EtcdClusterStatus>,
): EtcdClusterStatus {
  return {
    ...(cluster.status ?? {}),
    ...extra,
    conditions: setCondition(cluster.status?.conditions, condition, now),
    observedGeneration: cluster.metadata?.generation,
  };
}

/** The status as plain JSON data without the condition timestamps (undefined fields dropped). */
function comparable(status: EtcdClusterStatus | undefined): unknown {
  return JSON.parse(
    JSON.stringify({
      ...status,
      conditions: status?.conditions?.map(({ lastUpdateTime: _u, lastTransitionTime: _t, ...rest }) => rest),
    }),
  );
}

/**
 * True when two statuses say the same, whatever their key order: the API server returns a custom
 * resource with its keys sorted (it holds it as a map), while the status built here has them in
 * code order, so comparing serialisations wrote an unchanged status on every look.
 */
export function sameStatus(a: EtcdClusterStatus | undefined, b: EtcdClusterStatus): boolean {
  return isDeepStrictEqual(comparable(a), comparable(b));
}

/**
 * Writes the status only when it says something new: a paused or restoring cluster is looked at on
 * every resync, and rewriting the same status each time would cost an API write (and a watch event
 * to every watcher) per cluster per interval for nothing.
 */
async function writeStatusIfChanged(
  deps: StepDeps,
  cluster: EtcdCluster,
  next: EtcdClusterStatus,
): Promise<boolean> {
  if (sameStatus(cluster.status, next)) return false;
  await deps.kube.patchClusterStatus(cluster, next);
  return true;
}

export async function reconcile(input: ReconcileInput, deps: StepDeps): Promise<ReconcileResult> {
  const cluster = await deps.kube.getClusterNotOlderThan(input.namespace, input.name, input.notOlderThan);
  // Deleted (or being deleted): the garbage collector removes pods and Services via owner references.
  if (!cluster || cluster.metadata?.deletionTimestamp) return { kind: "gone" };
  const now = new Date();
  const generation = cluster.metadata?.generation;

  const validation = validateEtcdClusterSpec(cluster.spec ?? {});
  // The CRD refuses such names; a cluster created before that rule (or without the CRD's rules) is
  // reported here instead of failing at every pod and Service it would need.
  const nameProblem = clusterNameProblem(input.name);
  if (!validation.ok || nameProblem) {
    const problems = [...(nameProblem ? [nameProblem] : []), ...(validation.ok ? [] : validation.problems)];
    const message = problems.join("; ");
    const changed = await writeStatusIfChanged(
      deps,
      cluster,
      simpleStatus(
        cluster,
        now,
        { type: "Degraded", status: "True", reason: "InvalidSpec", message, observedGeneration: generation },
        { reason: "InvalidSpec" },
      ),
    );
    // Announced when it starts (or changes), not on every resync.
    if (changed) await deps.kube.event(cluster, "Warning", "InvalidSpec", message);
    return { kind: "invalid", problems };
  }
  const spec = validation.spec;
  if (spec.paused) {
    await writeStatusIfChanged(
      deps,
      cluster,
      simpleStatus(
        cluster,
        now,
        {
          type: "Progressing",
          status: "False",
          reason: "Paused",
          message: "spec.paused is true: the operator makes no change to this cluster",
          observedGeneration: generation,
        },
        { controlPaused: true },
      ),
    );
    return { kind: "paused" };
  }

  const restoring = cluster.metadata?.annotations?.[RESTORE_ANNOTATION];
  if (restoring) {
    await writeStatusIfChanged(
      deps,
      cluster,
      simpleStatus(
        cluster,
        now,
        {
          type: "Progressing",
          status: "True",
          reason: "Restoring",
          message:
            "an EtcdRestore is recreating the cluster from a backup; members are added once it is done",
          observedGeneration: generation,
        },
        {},
      ),
    );
    return { kind: "restoring" };
  }

  // TLS: the Secrets are checked before anything is built from them, on every look (a rotation
  // starts from here). A bad one stops every step, so no member is created or replaced with it,
  // and the running members keep the certificates they have.
  let stepDeps = deps;
  let memberTls: MemberTlsMaterial | undefined;
  let operatorTls: OperatorTlsSource | undefined;
  if (spec.TLS?.static) {
    const tls = await loadClusterTls(
      (ns, secret) => deps.kube.readSecret(ns, secret),
      input.name,
      input.namespace,
      spec,
      now.getTime(),
    );
    if (!tls.ok) {
      const message = tls.problems.join("; ");
      const status = simpleStatus(
        cluster,
        now,
        {
          type: "Degraded",
          status: "True",
          reason: "InvalidTLSSecret",
          message: `${message}; no member is created or replaced until this is fixed`,
          observedGeneration: generation,
        },
        {},
      );
      // Looked at again every few seconds while it lasts: only a change is written.
      if (!sameStatus(cluster.status, status)) await deps.kube.patchClusterStatus(cluster, status);
      // Keyed by the problem: while it lasts, the Event counts up instead of repeating.
      await deps.kube.event(cluster, "Warning", "InvalidTLSSecret", message, {
        key: `tls-${problemKey(message)}`,
      });
      return { kind: "blocked", reason: "InvalidTLSSecret", problems: tls.problems, requeueAfterMs: 10_000 };
    }
    memberTls = memberMaterial(tls.value);
    if (tls.value.client) stepDeps = { ...deps, etcd: { ...deps.etcd, tls: tls.value.client } };
    operatorTls = tls.value.operatorSource;
  }

  const observation = await observe(cluster, spec, stepDeps, memberTls);
  const step = planNextStep(observation);
  const log = deps.log.child({ step: step.kind });
  // Names the step before it changes anything: an operator killed mid-step leaves this line as the
  // record of what it was doing (the chaos suite kills workers on it).
  log.debug("step starting");
  let outcome: StepOutcome;
  try {
    outcome = await runStep(
      step,
      { cluster, spec, observation, memberTls, operatorTls },
      { ...stepDeps, log },
    );
  } catch (error) {
    const message = apiErrorMessage(error);
    await deps.kube.event(cluster, "Warning", "StepFailed", `${step.kind} failed: ${message}`);
    await deps.kube.patchClusterStatus(
      cluster,
      simpleStatus(
        cluster,
        now,
        {
          type: "Progressing",
          status: "True",
          reason: "StepFailed",
          message: `${step.kind} failed (retrying): ${message}`,
          observedGeneration: generation,
        },
        // A cluster whose first step fails (its pods refused, say) still shows a phase in
        // `kubectl get etcd`, beside the condition that says why.
        { phase: cluster.status?.phase || "Creating" },
      ),
    );
    throw new Error(`step ${step.kind} failed for ${input.namespace}/${input.name}`, { cause: error });
  }
  // A lasting problem (quorum lost, all members lost) is announced once, when it starts, not on every look.
  const degraded = cluster.status?.conditions?.find((c) => c.type === "Degraded");
  const repeated =
    outcome.event?.type === "Warning" &&
    degraded?.status === "True" &&
    degraded.reason === PROGRESS_REASON[step.kind];
  if (outcome.event && !repeated) {
    log.info({ reason: outcome.event.reason }, outcome.event.message);
    if (!outcome.announced)
      await deps.kube.event(cluster, outcome.event.type, outcome.event.reason, outcome.event.message);
  }
  const status = clusterStatus(observation, step, outcome, now);
  // Skip writes that would only move timestamps: each write is an update event for every watcher.
  if (!sameStatus(cluster.status, status)) await deps.kube.patchClusterStatus(cluster, status);
  const quickLooks =
    step.kind === "steady" && !spec.TLS?.static && !spec.maintenance.defragmentation.schedule;
  return {
    kind: "step",
    step,
    outcome,
    ...(quickLooks ? { steadyStatuses: [...observation.health.values()] } : {}),
  };
}

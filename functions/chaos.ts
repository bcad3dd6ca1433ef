// Chaos mode (coreos's --chaos-level, for users' own test environments): now and then delete one
// random member pod of a cluster that opted in, so that the healing paths run all the time and not
// only on the day they are needed. Off unless the operator runs with CHAOS_LEVEL > 0, and then only
// for clusters annotated etcd.database.coreos.com/chaos: "true". Never more than one member down
// per cluster: a cluster is only touched when it is whole and healthy (every member pod Ready, the
// operator's status Available and not Progressing), so the next kill waits until the last one healed.
import type { V1Pod } from "@kubernetes/client-node";
import {
  CHAOS_ANNOTATION,
  type EtcdCluster,
  RECOVERY_ANNOTATION,
  RESTORE_ANNOTATION,
} from "../shared/api/etcd-cluster.ts";
import type { Kube } from "../shared/kube.ts";
import type { Logger } from "../shared/log.ts";

/** Highest CHAOS_LEVEL: at level N each look kills with probability N / MAX_CHAOS_LEVEL. */
export const MAX_CHAOS_LEVEL = 10;

export type ChaosDecision = { kill: string } | { skip: string };

function isReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

/**
 * Whether to kill now, and whom. Pure: `roll` is a number in [0, 1) for the level's odds, `pick`
 * one in [0, 1) for the victim.
 */
export function chaosDecision(
  cluster: EtcdCluster,
  pods: readonly V1Pod[],
  level: number,
  roll: number,
  pick: number,
): ChaosDecision {
  const annotations = cluster.metadata?.annotations ?? {};
  if (annotations[CHAOS_ANNOTATION] !== "true") return { skip: "not opted in" };
  if (level <= 0) return { skip: "chaos is off" };
  if (cluster.metadata?.deletionTimestamp) return { skip: "being deleted" };
  if (cluster.spec?.paused) return { skip: "paused" };
  if (annotations[RESTORE_ANNOTATION] || annotations[RECOVERY_ANNOTATION]) return { skip: "being rebuilt" };
  const status = cluster.status;
  const condition = (type: string) => status?.conditions?.find((c) => c.type === type)?.status;
  const size = cluster.spec?.size ?? 0;
  if (condition("Available") !== "True" || condition("Progressing") !== "False")
    return { skip: "not steady and available" };
  if (status?.readyMembers !== size) return { skip: `${status?.readyMembers ?? 0} of ${size} members ready` };
  const live = pods.filter((p) => !p.metadata?.deletionTimestamp);
  if (live.length !== pods.length || live.length !== size || !live.every(isReady))
    return { skip: "member pods not all up and Ready" };
  // A one-member cluster loses its data with its only pod: chaos never does that.
  if (size < 3) return { skip: "fewer than 3 members" };
  if (roll >= Math.min(level, MAX_CHAOS_LEVEL) / MAX_CHAOS_LEVEL) return { skip: "not this time" };
  const names = live.map((p) => p.metadata?.name ?? "").sort();
  const victim = names[Math.min(names.length - 1, Math.floor(pick * names.length))];
  return victim ? { kill: victim } : { skip: "no member pod" };
}

export interface ChaosDeps {
  kube: Kube;
  log: Logger;
  level: number;
  random: () => number;
}

/** One look at one cluster: maybe delete one member pod (at once, as a crash would), with an Event. */
export async function chaosStep(
  input: { namespace: string; name: string },
  deps: ChaosDeps,
): Promise<ChaosDecision> {
  const cluster = await deps.kube.getCluster(input.namespace, input.name);
  if (!cluster) return { skip: "gone" };
  const pods = await deps.kube.listMemberPods(input.namespace, input.name);
  const decision = chaosDecision(cluster, pods, deps.level, deps.random(), deps.random());
  if (!("kill" in decision)) return decision;
  await deps.kube.deletePod(input.namespace, decision.kill, { gracePeriodSeconds: 0 });
  const message = `chaos mode (level ${deps.level}) deleted member pod ${decision.kill}; the operator replaces it`;
  deps.log.warn({ cluster: `${input.namespace}/${input.name}`, pod: decision.kill }, message);
  await deps.kube.event(cluster, "Warning", "ChaosKilledMember", message);
  return decision;
}

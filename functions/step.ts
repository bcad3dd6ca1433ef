// What every step function gets and returns. A step is one idempotent change to the world
// (create Services, seed, add/promote/remove a member, delete a pod); it re-checks what it
// needs, does its one change, and says when the cluster should be looked at again.
import type { EtcdCluster, EtcdClusterStatus, NormalizedSpec } from "../shared/api/etcd-cluster.ts";
import type { EtcdClientOptions } from "../shared/etcd-members.ts";
import type { Kube } from "../shared/kube.ts";
import type { Logger } from "../shared/log.ts";
import type { MemberTlsMaterial, OperatorTlsSource } from "../shared/tls-secrets.ts";
import type { Observation } from "./plan.ts";

export interface StepDeps {
  kube: Kube;
  log: Logger;
  /** Options for the etcd client (timeouts, TLS) used to talk to members. */
  etcd: EtcdClientOptions;
  /**
   * Throws when this worker no longer holds the cluster's lease (another worker took over after
   * ours expired). Called before every change, so two workers never both act on one cluster.
   */
  guard(): Promise<void>;
  /** How long a voter may stay unhealthy before it is replaced (default 60 s). */
  unhealthyGraceMs?: number;
  /** The operator's image, for the init containers of a recovery seed. */
  operatorImage: string;
}

export interface StepInput {
  cluster: EtcdCluster;
  spec: NormalizedSpec;
  observation: Observation;
  /** A TLS cluster's checked member certificates: what new member pods get (member-tls.ts). */
  memberTls?: MemberTlsMaterial;
  /** With client TLS: the operator's client certificate Secret, for init containers that reach members. */
  operatorTls?: OperatorTlsSource;
}

export interface StepEvent {
  type: "Normal" | "Warning";
  reason: string;
  message: string;
}

export interface StepOutcome {
  /** Look again after this many ms (0: at once, chaining the next step); undefined: nothing pending. */
  requeueAfterMs?: number;
  event?: StepEvent;
  /**
   * The step sent `event` itself, before its change (keyed, so a retry counts it again): a worker
   * killed between the change and an Event sent after it would lose the Event for good, since the
   * next look finds the change made. Reconcile then only logs it and puts it in the status.
   */
  announced?: boolean;
  /** Members defragmented, in order: status.lastDefragmentation and memberDefragmentations. */
  defragmented?: NonNullable<EtcdClusterStatus["lastDefragmentation"]>[];
  /** A recovery from NOSPACE ran: recorded in status.lastSpaceRecovery. */
  spaceRecovery?: EtcdClusterStatus["lastSpaceRecovery"];
}

/**
 * Client endpoints for membership calls: healthy voting members first, then the rest, learners
 * last (a learner refuses member add/remove/promote and linearizable reads).
 */
export function memberEndpoints(observation: Observation): string[] {
  const learners = new Set(
    (observation.members ?? []).filter((m) => m.isLearner).map((m) => m.name || m.peerURLs[0] || ""),
  );
  const rank = (p: Observation["pods"][number]): number => {
    if (learners.has(p.name) || [...learners].some((url) => url.includes(`//${p.name}.`))) return 2;
    return observation.health.get(p.name)?.ok ? 0 : 1;
  };
  return observation.pods
    .filter((p) => p.ip && !p.terminating)
    .sort((a, b) => rank(a) - rank(b))
    .map((p) => `http://${p.ip}:2379`);
}

export function clusterKey(cluster: EtcdCluster): string {
  return `${cluster.metadata?.namespace}/${cluster.metadata?.name}`;
}

/**
 * etcd refuses membership changes for a while after one (it wants every voter connected for 5 s,
 * one learner at a time): "check again soon", not a failure.
 */
export function isReconfigurationRefused(error: unknown): boolean {
  const texts = ["unhealthy cluster", "not enough started members", "too many learner members"];
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (texts.some((t) => e instanceof Error && e.message.includes(t))) return true;
  }
  return false;
}

/**
 * How soon a refused membership change is tried again. Right after a dead member is removed, etcd
 * refuses to add its replacement for a while ("unhealthy cluster": the member asked wants to have
 * been connected to every voter for some seconds). In bench/convergence.ts traces that lasted
 * 0.1–1.4 s for the operator in about half its heals (up to 2.3 s for the by-hand reference);
 * asked again after a second, a heal waited up to a second longer than it had to. A refusal is a
 * cheap local check in etcd, so asking a few times a second costs nothing.
 */
export const REFUSED_RETRY_MS = 200;

/** Runs a membership change; a temporary refusal by etcd becomes a short wait. */
export async function unlessRefused(work: () => Promise<StepOutcome>): Promise<StepOutcome> {
  try {
    return await work();
  } catch (error) {
    if (isReconfigurationRefused(error)) return { requeueAfterMs: REFUSED_RETRY_MS };
    throw error;
  }
}

// What every step function gets and returns. A step is one idempotent change to the world
// (create Services, seed, add/promote/remove a member, delete a pod); it re-checks what it
// needs, does its one change, and says when the cluster should be looked at again.
import type { EtcdCluster, NormalizedSpec } from "../shared/api/etcd-cluster.ts";
import type { EtcdClientOptions } from "../shared/etcd-members.ts";
import type { Kube } from "../shared/kube.ts";
import type { Logger } from "../shared/log.ts";
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
}

export interface StepInput {
  cluster: EtcdCluster;
  spec: NormalizedSpec;
  observation: Observation;
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
}

/** Client endpoints of the member pods that have an IP, healthy ones first. */
export function memberEndpoints(observation: Observation): string[] {
  const withIp = observation.pods.filter((p) => p.ip && !p.terminating);
  const healthy = withIp.filter((p) => observation.health.get(p.name)?.ok);
  const others = withIp.filter((p) => !observation.health.get(p.name)?.ok);
  return [...healthy, ...others].map((p) => `http://${p.ip}:2379`);
}

export function clusterKey(cluster: EtcdCluster): string {
  return `${cluster.metadata?.namespace}/${cluster.metadata?.name}`;
}

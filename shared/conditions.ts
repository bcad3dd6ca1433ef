// Kubernetes-style conditions: a condition's lastTransitionTime changes only when its status
// flips, so `kubectl get -o yaml` tells how long a cluster has been (un)available.

import type { ClusterCondition } from "./api/etcd-cluster.ts";

export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  lastTransitionTime?: string;
  lastUpdateTime?: string;
  observedGeneration?: number;
}

export function setCondition(
  existing: readonly ClusterCondition[] | undefined,
  next: Omit<Condition, "lastTransitionTime" | "lastUpdateTime">,
  now: Date,
): ClusterCondition[] {
  const list = [...(existing ?? [])];
  const index = list.findIndex((c) => c.type === next.type);
  const previous = index >= 0 ? list[index] : undefined;
  const timestamp = now.toISOString();
  const updated: ClusterCondition = {
    ...next,
    lastTransitionTime:
      previous && previous.status === next.status && previous.lastTransitionTime
        ? previous.lastTransitionTime
        : timestamp,
    lastUpdateTime: timestamp,
  };
  if (index >= 0) list[index] = updated;
  else list.push(updated);
  return list;
}

export function findCondition(
  list: readonly ClusterCondition[] | undefined,
  type: string,
): ClusterCondition | undefined {
  return list?.find((c) => c.type === type);
}

// Which EtcdClusters this operator instance manages, as the coreos operator decided it: a
// namespaced operator takes the clusters of its namespace that are not annotated cluster-wide;
// a cluster-wide operator takes, in every namespace, only those annotated
// `etcd.database.coreos.com/scope: clusterwide`. Two operators never fight over one cluster.
import { type EtcdCluster, SCOPE_ANNOTATION, SCOPE_CLUSTERWIDE } from "./api/etcd-cluster.ts";

export interface ScopeConfig {
  namespace: string;
  clusterWide: boolean;
}

export function inScope(cluster: Pick<EtcdCluster, "metadata">, scope: ScopeConfig): boolean {
  const clusterwide = cluster.metadata?.annotations?.[SCOPE_ANNOTATION] === SCOPE_CLUSTERWIDE;
  if (scope.clusterWide) return clusterwide;
  return cluster.metadata?.namespace === scope.namespace && !clusterwide;
}

// Reads the API's objects for the routes: an EtcdCluster or EtcdBackup in this operator's scope, its
// member pods, and the state of its job in the queue. A failure of Kubernetes or Redis becomes a 503
// that names what could not be read; an object that is missing or not managed here is a 404.
import type { V1Pod } from "@kubernetes/client-node";
import type { Job, Queue } from "bullmq";
import type { FastifyRequest } from "fastify";
import { BACKUP_PLURAL, type EtcdBackup } from "../../../shared/api/etcd-backup.ts";
import { type EtcdCluster, GROUP, VERSION } from "../../../shared/api/etcd-cluster.ts";
import type { OperatorConfig } from "../../../shared/config.ts";
import { httpStatusOf, type Kube } from "../../../shared/kube.ts";
import { VERSION_ANNOTATION } from "../../../shared/member-pods.ts";
import { inScope } from "../../../shared/scope.ts";
import { notFound, unavailable } from "../errors.ts";
import type { JobState } from "../schemas.ts";

/** The trigger routes' body is optional: no body (or JSON null) means `{}`. */
export async function emptyBodyAsObject(request: FastifyRequest): Promise<void> {
  if (request.body === undefined || request.body === null) request.body = {};
}

export async function guarded<T>(what: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw unavailable(`could not ${what}: the Kubernetes API or Redis did not answer; try again`, error);
  }
}

function scopeNote(config: OperatorConfig): string {
  return config.clusterWide
    ? 'this operator manages only clusters annotated "etcd.database.coreos.com/scope: clusterwide"'
    : `this operator manages namespace ${JSON.stringify(config.namespace)} only`;
}

export async function findCluster(
  kube: Kube,
  config: OperatorConfig,
  namespace: string,
  name: string,
): Promise<EtcdCluster> {
  const cluster = await guarded(`read EtcdCluster ${namespace}/${name}`, () =>
    kube.getCluster(namespace, name),
  );
  if (!cluster) throw notFound(`EtcdCluster ${namespace}/${name} not found`);
  if (!inScope(cluster, config)) {
    throw notFound(`EtcdCluster ${namespace}/${name} is not managed by this operator: ${scopeNote(config)}`);
  }
  return cluster;
}

export async function findBackup(
  kube: Kube,
  config: OperatorConfig,
  namespace: string,
  name: string,
): Promise<EtcdBackup> {
  const backup = await guarded(`read EtcdBackup ${namespace}/${name}`, async () => {
    try {
      return (await kube.custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: BACKUP_PLURAL,
        name,
      })) as EtcdBackup;
    } catch (error) {
      if (httpStatusOf(error) === 404) return undefined;
      throw error;
    }
  });
  if (!backup) throw notFound(`EtcdBackup ${namespace}/${name} not found`);
  if (!inScope(backup, config)) {
    throw notFound(`EtcdBackup ${namespace}/${name} is not managed by this operator: ${scopeNote(config)}`);
  }
  return backup;
}

const iso = (ms: number | undefined | null): string | undefined =>
  typeof ms === "number" && ms > 0 ? new Date(ms).toISOString() : undefined;

export async function jobState(queue: Queue, jobId: string): Promise<JobState> {
  return guarded(`read job ${jobId} from the queue`, async () => {
    const job: Job | undefined = await queue.getJob(jobId);
    if (!job) return { queue: queue.name, jobId, state: "none" };
    const state = await job.getState();
    const data: unknown = job.data;
    const reason =
      typeof data === "object" && data !== null && "reason" in data && typeof data.reason === "string"
        ? data.reason
        : undefined;
    return {
      queue: queue.name,
      jobId,
      state: state === "unknown" ? "none" : state,
      attemptsMade: job.attemptsMade,
      reason,
      failedReason: job.failedReason || undefined,
      enqueuedAt: iso(job.timestamp),
      startedAt: iso(job.processedOn),
      finishedAt: iso(job.finishedOn),
    };
  });
}

export function memberPod(pod: V1Pod) {
  return {
    name: pod.metadata?.name ?? "",
    phase: pod.status?.phase ?? "Pending",
    ready: pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false,
    podIP: pod.status?.podIP,
    version: pod.metadata?.annotations?.[VERSION_ANNOTATION],
    restarts: (pod.status?.containerStatuses ?? []).reduce((n, c) => n + (c.restartCount ?? 0), 0),
    terminating: pod.metadata?.deletionTimestamp !== undefined,
    createdAt: pod.metadata?.creationTimestamp
      ? new Date(pod.metadata.creationTimestamp).toISOString()
      : undefined,
  };
}

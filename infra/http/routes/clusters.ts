// EtcdCluster routes: read a cluster's state (spec, status, member pods, its reconcile job) and ask
// for a reconcile now. The trigger is the same request the watcher makes on every event
// (shared/queue.ts requestReconcile), so it is safe to send any number of times.
import type { FastifyInstance } from "fastify";
import { GROUP, PLURAL } from "../../../shared/api/etcd-cluster.ts";
import { RECONCILE_QUEUE, reconcileJobId, requestReconcile } from "../../../shared/queue.ts";
import type { AuthHooks } from "../auth.ts";
import type { HttpDeps } from "../deps.ts";
import { Accepted, ClusterState, ObjectParams, TriggerBody, withErrors } from "../schemas.ts";
import { emptyBodyAsObject, findCluster, guarded, jobState, memberPod } from "./objects.ts";

export const CLUSTER_PATH = "/v1/namespaces/:ns/etcdclusters/:name";

export function clusterRoutes(app: FastifyInstance, deps: HttpDeps, auth: AuthHooks): void {
  const { kube, config } = deps;

  app.get<{ Params: ObjectParams }>(
    CLUSTER_PATH,
    {
      schema: {
        summary: "Read an EtcdCluster's state",
        description:
          "Its spec and status, its member pods, and the state of its reconcile job. Needs `get` on the cluster.",
        tags: ["etcdclusters"],
        params: ObjectParams,
        response: withErrors({ 200: ClusterState }),
      },
      preHandler: auth.require((request) => {
        const { ns, name } = request.params as ObjectParams;
        return { verb: "get", group: GROUP, resource: PLURAL, namespace: ns, name };
      }),
    },
    async (request) => {
      const { ns, name } = request.params;
      const cluster = await findCluster(kube, config, ns, name);
      const [pods, reconcile] = await Promise.all([
        guarded(`list the pods of ${ns}/${name}`, () => kube.listMemberPods(ns, name)),
        jobState(deps.reconcileQueue, reconcileJobId(ns, name)),
      ]);
      const state: ClusterState = {
        namespace: ns,
        name,
        generation: cluster.metadata?.generation,
        spec: { ...cluster.spec },
        status: { ...(cluster.status ?? {}) },
        members: pods.map(memberPod).sort((a, b) => a.name.localeCompare(b.name)),
        queue: { reconcile },
      };
      return state;
    },
  );

  app.post<{ Params: ObjectParams; Body: TriggerBody | undefined }>(
    `${CLUSTER_PATH}/reconcile`,
    {
      bodyLimit: 4096,
      preValidation: emptyBodyAsObject,
      schema: {
        summary: "Reconcile an EtcdCluster now",
        description:
          "Queues a reconcile of the cluster (or brings a delayed one forward); the worker runs its next step. " +
          "Needs `update` on the cluster. Answers 202 at once; the cluster's Events show the step.",
        tags: ["etcdclusters"],
        params: ObjectParams,
        body: TriggerBody,
        response: withErrors({ 202: Accepted }),
      },
      preHandler: auth.require((request) => {
        const { ns, name } = request.params as ObjectParams;
        return { verb: "update", group: GROUP, resource: PLURAL, namespace: ns, name };
      }),
    },
    async (request, reply) => {
      const { ns, name } = request.params;
      await findCluster(kube, config, ns, name);
      const user = request.identity?.username ?? "unknown";
      await guarded(`queue a reconcile of ${ns}/${name}`, () =>
        requestReconcile(deps.reconcileQueue, deps.redis, ns, name, { reason: "http" }),
      );
      deps.log.info(
        { cluster: `${ns}/${name}`, user, note: request.body?.reason },
        "reconcile requested over HTTP",
      );
      const accepted: Accepted = {
        accepted: true,
        jobId: reconcileJobId(ns, name),
        queued: true,
        message: `reconcile of EtcdCluster ${ns}/${name} requested on queue ${RECONCILE_QUEUE}`,
      };
      return reply.code(202).send(accepted);
    },
  );
}

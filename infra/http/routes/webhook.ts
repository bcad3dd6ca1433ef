// The validating admission webhook (AdmissionReview v1) for EtcdCluster, EtcdBackup and EtcdRestore.
// The API server calls it without credentials (it authenticates us by our serving certificate), so
// these routes take no token; what a caller gets is a decision about the object it sent and, for an
// accepted EtcdCluster change, a reconcile request, which is harmless to repeat. Decisions come
// from the pure reviews in ../admission/. A dry run gets its decision but queues nothing
// (sideEffects: NoneOnDryRun).
import { type Static, Type } from "@sinclair/typebox";
import type { FastifyInstance } from "fastify";
import { BACKUP_PLURAL } from "../../../shared/api/etcd-backup.ts";
import { GROUP, PLURAL } from "../../../shared/api/etcd-cluster.ts";
import { RESTORE_PLURAL } from "../../../shared/api/etcd-restore.ts";
import { VERSION_ANNOTATION } from "../../../shared/member-pods.ts";
import { operatorMetrics } from "../../../shared/metrics.ts";
import { requestReconcile } from "../../../shared/queue.ts";
import { inScope } from "../../../shared/scope.ts";
import { reviewEtcdBackup, reviewEtcdRestore } from "../admission/backup-storage.ts";
import { type Decision, decide, recordAt } from "../admission/decision.ts";
import { reviewEtcdCluster, reviewEtcdClusterScale } from "../admission/etcd-cluster.ts";
import type { HttpDeps } from "../deps.ts";
import { withErrors } from "../schemas.ts";

export const WEBHOOK_PATHS = {
  [PLURAL]: "/validate/etcdclusters",
  [BACKUP_PLURAL]: "/validate/etcdbackups",
  [RESTORE_PLURAL]: "/validate/etcdrestores",
} as const;

export const ADMISSION_RECONCILE_DELAY_MS = 1_000;

/** An AdmissionReview carries whole objects (an EtcdCluster and its old version): allow for big ones. */
const REVIEW_BODY_LIMIT = 6 * 1024 * 1024;

const AdmissionRequest = Type.Object(
  {
    uid: Type.String({
      minLength: 1,
      maxLength: 128,
      description: "the request's uid, echoed in the response",
    }),
    kind: Type.Object({ group: Type.String(), version: Type.String(), kind: Type.String() }),
    resource: Type.Object({ group: Type.String(), version: Type.String(), resource: Type.String() }),
    subResource: Type.Optional(Type.String()),
    operation: Type.Union([
      Type.Literal("CREATE"),
      Type.Literal("UPDATE"),
      Type.Literal("DELETE"),
      Type.Literal("CONNECT"),
    ]),
    namespace: Type.Optional(Type.String()),
    name: Type.Optional(Type.String()),
    object: Type.Optional(Type.Unknown()),
    oldObject: Type.Optional(Type.Unknown()),
    dryRun: Type.Optional(Type.Boolean()),
    userInfo: Type.Optional(
      Type.Object({ username: Type.Optional(Type.String()) }, { additionalProperties: true }),
    ),
  },
  { additionalProperties: true },
);

export const AdmissionReview = Type.Object(
  {
    apiVersion: Type.Literal("admission.k8s.io/v1", { description: '"admission.k8s.io/v1"' }),
    kind: Type.Literal("AdmissionReview", { description: '"AdmissionReview"' }),
    request: AdmissionRequest,
  },
  { additionalProperties: true },
);
export type AdmissionReview = Static<typeof AdmissionReview>;
type AdmissionRequest = Static<typeof AdmissionRequest>;

const AdmissionReviewResponse = Type.Object({
  apiVersion: Type.String(),
  kind: Type.String(),
  response: Type.Object({
    uid: Type.String(),
    allowed: Type.Boolean(),
    status: Type.Optional(
      Type.Object({ code: Type.Integer(), reason: Type.String(), message: Type.String() }),
    ),
    warnings: Type.Optional(Type.Array(Type.String())),
  }),
});

async function reviewCluster(request: AdmissionRequest, deps: HttpDeps): Promise<Decision> {
  if (request.subResource === "scale") return reviewEtcdClusterScale(request.oldObject, request.object);
  if (request.subResource) return decide([]);
  const operation = request.operation === "UPDATE" ? "UPDATE" : "CREATE";
  let runningVersions: string[] | undefined;
  if (operation === "UPDATE" && request.namespace && request.name) {
    // What the member pods run is the truth for downgrades (status.currentVersion is only the oldest).
    try {
      const pods = await deps.kube.listMemberPods(request.namespace, request.name);
      runningVersions = pods
        .filter((p) => !p.metadata?.deletionTimestamp)
        .map((p) => p.metadata?.annotations?.[VERSION_ANNOTATION])
        .filter((v): v is string => typeof v === "string");
    } catch (error) {
      deps.log.warn({ err: error }, "could not list member pods for the review; using the cluster's status");
    }
  }
  return reviewEtcdCluster({
    operation,
    object: request.object,
    oldObject: request.oldObject,
    runningVersions,
  });
}

async function review(resource: string, request: AdmissionRequest, deps: HttpDeps): Promise<Decision> {
  if (request.resource.group !== GROUP || request.resource.resource !== resource) {
    const got = `${request.resource.resource}.${request.resource.group}`;
    return decide([
      `this webhook path reviews ${resource}.${GROUP}, not ${got}: check the ValidatingWebhookConfiguration`,
    ]);
  }
  if (request.operation !== "CREATE" && request.operation !== "UPDATE") return decide([]);
  if (request.object === undefined || request.object === null) {
    return decide([`${request.operation} of ${resource} without an object`]);
  }
  const operation = request.operation;
  if (resource === PLURAL) return reviewCluster(request, deps);
  if (resource === BACKUP_PLURAL)
    return reviewEtcdBackup({ operation, object: request.object, oldObject: request.oldObject });
  return reviewEtcdRestore({ operation, object: request.object, oldObject: request.oldObject });
}

/**
 * Accepted cluster changes get a reconcile of their own, so they are acted on even while the watcher
 * lags or is down. The API server stores the object only after every webhook allowed it, so the
 * reconcile is delayed a little: run at once, it could read the cluster as it was before the change.
 */
async function enqueueAccepted(request: AdmissionRequest, deps: HttpDeps): Promise<void> {
  if (request.dryRun || request.subResource === "status") return;
  const metadata = recordAt(request.object, "metadata");
  const name = typeof metadata?.name === "string" ? metadata.name : request.name;
  const namespace =
    request.namespace ?? (typeof metadata?.namespace === "string" ? metadata.namespace : undefined);
  if (!name || !namespace) return;
  const annotations = recordAt(metadata, "annotations");
  const stringAnnotations: Record<string, string> = {};
  for (const [key, value] of Object.entries(annotations ?? {}))
    if (typeof value === "string") stringAnnotations[key] = value;
  if (!inScope({ metadata: { name, namespace, annotations: stringAnnotations } }, deps.config)) return;
  try {
    await requestReconcile(deps.reconcileQueue, deps.redis, namespace, name, {
      reason: "admission",
      delayMs: ADMISSION_RECONCILE_DELAY_MS,
    });
  } catch (error) {
    // The watcher enqueues it anyway when the change is stored: never fail an admission for this.
    deps.log.warn(
      { err: error, cluster: `${namespace}/${name}` },
      "could not queue a reconcile after admission",
    );
  }
}

export function webhookRoutes(app: FastifyInstance, deps: HttpDeps): void {
  for (const [resource, path] of Object.entries(WEBHOOK_PATHS)) {
    app.post<{ Body: AdmissionReview }>(
      path,
      {
        bodyLimit: REVIEW_BODY_LIMIT,
        config: { auth: "none" },
        schema: {
          summary: `Validating admission webhook for ${resource}.${GROUP}`,
          description:
            "Called by the Kubernetes API server (AdmissionReview v1). Refuses what the CRD schema cannot " +
            "express, with a message for people; allowed EtcdCluster changes are reconciled at once.",
          tags: ["admission"],
          security: [],
          body: AdmissionReview,
          response: withErrors({ 200: AdmissionReviewResponse }),
        },
      },
      async (request) => {
        const admission = request.body.request;
        const decision = await review(resource, admission, deps);
        operatorMetrics().admissionReviews.inc({
          resource,
          operation: admission.operation,
          allowed: String(decision.allowed),
        });
        const who = admission.userInfo?.username;
        const target = `${admission.namespace ?? ""}/${admission.name ?? ""}`;
        if (decision.allowed) {
          deps.log.debug(
            { resource, target, operation: admission.operation, user: who },
            "admission allowed",
          );
          if (resource === PLURAL) await enqueueAccepted(admission, deps);
        } else {
          deps.log.info(
            { resource, target, operation: admission.operation, user: who, reason: decision.message },
            "admission refused",
          );
        }
        return {
          apiVersion: "admission.k8s.io/v1",
          kind: "AdmissionReview",
          response: {
            uid: admission.uid,
            allowed: decision.allowed,
            ...(decision.allowed
              ? {}
              : { status: { code: 422, reason: "Invalid", message: decision.message ?? "refused" } }),
            ...(decision.warnings.length > 0 ? { warnings: decision.warnings } : {}),
          },
        };
      },
    );
  }
}

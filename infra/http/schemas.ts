// Request and response schemas of the HTTP API (TypeBox, so each is a JSON Schema for validation
// and the OpenAPI description, and a TypeScript type). Descriptions double as the "must be …" part
// of validation messages (see errors.ts).
import { type Static, Type } from "@sinclair/typebox";

export const NamespaceName = Type.String({
  minLength: 1,
  maxLength: 63,
  pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
  description:
    'a namespace name: 1 to 63 lower-case letters, digits and "-", starting and ending with a letter or digit',
});

export const ObjectName = Type.String({
  minLength: 1,
  maxLength: 253,
  pattern: "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
  description:
    'a Kubernetes object name: 1 to 253 lower-case letters, digits, "-" and ".", starting and ending with a letter or digit',
});

export const ObjectParams = Type.Object(
  { ns: NamespaceName, name: ObjectName },
  { additionalProperties: false },
);
export type ObjectParams = Static<typeof ObjectParams>;

export const TriggerBody = Type.Object(
  {
    reason: Type.Optional(
      Type.String({
        maxLength: 100,
        pattern: "^[ -~]*$",
        description: "a short note for the logs: at most 100 printable ASCII characters",
      }),
    ),
  },
  { additionalProperties: false, description: "Optional; a JSON object." },
);
export type TriggerBody = Static<typeof TriggerBody>;

export const ErrorResponse = Type.Object(
  {
    statusCode: Type.Integer(),
    error: Type.String({ description: "CamelCase reason, e.g. NotFound, Forbidden, BadRequest" }),
    message: Type.String({ description: "What went wrong, for people" }),
  },
  { $id: "Error", description: "Every error answer." },
);

export const Accepted = Type.Object({
  accepted: Type.Literal(true),
  jobId: Type.String({ description: "The BullMQ job id" }),
  queued: Type.Boolean({
    description: "false when a job for this object was already waiting or running, so none was added",
  }),
  message: Type.String(),
});
export type Accepted = Static<typeof Accepted>;

export const JobState = Type.Object({
  queue: Type.String(),
  jobId: Type.String(),
  state: Type.String({
    description:
      "none (no job: nothing pending), waiting, delayed (a step asked to look again later), active, prioritized, failed, completed",
  }),
  attemptsMade: Type.Optional(Type.Integer()),
  reason: Type.Optional(Type.String({ description: "Why the job was requested" })),
  failedReason: Type.Optional(Type.String()),
  enqueuedAt: Type.Optional(Type.String({ description: "RFC 3339" })),
  startedAt: Type.Optional(Type.String({ description: "RFC 3339; the last start" })),
  finishedAt: Type.Optional(Type.String({ description: "RFC 3339" })),
});
export type JobState = Static<typeof JobState>;

export const MemberPod = Type.Object({
  name: Type.String(),
  phase: Type.String(),
  ready: Type.Boolean(),
  podIP: Type.Optional(Type.String()),
  version: Type.Optional(Type.String({ description: "The etcd version the pod is set to run" })),
  restarts: Type.Integer(),
  terminating: Type.Boolean(),
  createdAt: Type.Optional(Type.String()),
});

/** spec and status pass through whole: their schemas are the CRDs'. */
const AnyObject = Type.Object({}, { additionalProperties: true });

export const ClusterState = Type.Object({
  namespace: Type.String(),
  name: Type.String(),
  generation: Type.Optional(Type.Integer()),
  spec: AnyObject,
  status: AnyObject,
  members: Type.Array(MemberPod, { description: "The cluster's member pods" }),
  queue: Type.Object({ reconcile: JobState }),
});
export type ClusterState = Static<typeof ClusterState>;

export const BackupState = Type.Object({
  namespace: Type.String(),
  name: Type.String(),
  spec: AnyObject,
  status: AnyObject,
  queue: Type.Object({ backup: JobState }),
});
export type BackupState = Static<typeof BackupState>;

export const Health = Type.Object({
  status: Type.Union([Type.Literal("ok"), Type.Literal("failing")]),
  checks: Type.Record(Type.String(), Type.String(), {
    description: '"ok" or why the check failed',
  }),
});
export type Health = Static<typeof Health>;

const errorResponses = {
  400: ErrorResponse,
  401: ErrorResponse,
  403: ErrorResponse,
  404: ErrorResponse,
  429: ErrorResponse,
  503: ErrorResponse,
};

export function withErrors<T extends Record<number, unknown>>(responses: T): T & typeof errorResponses {
  return { ...errorResponses, ...responses };
}

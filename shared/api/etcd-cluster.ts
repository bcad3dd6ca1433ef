// The EtcdCluster API (etcd.database.coreos.com/v1beta2), field for field as the coreos etcd-operator
// defined it (pkg/apis/etcd/v1beta2/cluster.go), so manifests written for that operator apply
// unchanged. Each TypeBox schema here is the one source for the TypeScript type, the runtime check and
// (through infra/crds.ts) the CRD's OpenAPI schema, so `kubectl explain` reads these descriptions.
// Checks a schema cannot express (supported etcd minors, reserved labels, readable messages) live in
// validate-etcd-cluster.ts.

import type {
  V1Affinity,
  V1EnvVarSource,
  V1ObjectMeta,
  V1PersistentVolumeClaimSpec,
  V1PodSecurityContext,
  V1ResourceRequirements,
  V1Toleration,
} from "@kubernetes/client-node";
import { type Static, type TUnsafe, Type } from "@sinclair/typebox";
import { DEFAULT_ETCD_VERSION, minorOf } from "../etcd-versions.ts";

// ---------------------------------------------------------------------------------------------------------
// Names

export const GROUP = "etcd.database.coreos.com";
export const VERSION = "v1beta2";
export const API_VERSION = `${GROUP}/${VERSION}`;
export const KIND = "EtcdCluster";
export const LIST_KIND = "EtcdClusterList";
export const PLURAL = "etcdclusters";
export const SINGULAR = "etcdcluster";
/** coreos registered `etcd`, so `kubectl get etcd` keeps working. */
export const SHORT_NAMES: readonly string[] = ["etcd"];
export const CRD_NAME = `${PLURAL}.${GROUP}`;

/** A cluster with this annotation is managed by a cluster-wide operator; namespaced operators ignore it. */
export const SCOPE_ANNOTATION = `${GROUP}/scope`;
export const SCOPE_CLUSTERWIDE = "clusterwide";
/**
 * Set by a restore while it replaces the cluster's members (value: the EtcdRestore's UID); the
 * reconcile keeps off the cluster until the restore lifts it.
 */
export const RESTORE_ANNOTATION = `${GROUP}/restore-in-progress`;
/**
 * "true" lets a lower spec.version through: one minor down from 3.6 or newer, with etcd's downgrade
 * procedure. Without it a downgrade is refused (by the webhook, and by the reconcile).
 */
export const ALLOW_DOWNGRADE_ANNOTATION = `${GROUP}/allow-downgrade`;
/**
 * Set once every member took a snapshot past the log entries written before etcd 3.6 (which 3.7
 * cannot read); the 3.6 → 3.7 upgrade waits for it. Lifted when a restore or recovery rebuilds the log.
 */
export const OLD_LOG_DRAINED_ANNOTATION = `${GROUP}/pre-3.6-log-drained`;
/** Set while the cluster is rebuilt from a surviving member after losing quorum (JSON, see functions/plan.ts RecoveryMark). */
export const RECOVERY_ANNOTATION = `${GROUP}/quorum-recovery`;
/**
 * "true" opts a cluster in to the operator's chaos mode (CHAOS_LEVEL > 0, for test environments):
 * now and then one of its member pods is deleted. Clusters without it are never touched.
 */
export const CHAOS_ANNOTATION = `${GROUP}/chaos`;

/**
 * Member pods are `<cluster>-<10 characters>` and their DNS names `<pod>.<cluster>.<ns>.svc`, so the
 * cluster's name must leave a pod name that is a DNS label (63 characters, a letter first, no dots).
 */
export const MAX_CLUSTER_NAME_LENGTH = 52;
export const CLUSTER_NAME_RE = "^[a-z]([-a-z0-9]*[a-z0-9])?$";

/** CEL rules on the whole EtcdCluster: its name, which every member pod and Service name is built from. */
export const CLUSTER_OBJECT_VALIDATIONS = [
  {
    rule: `size(self.metadata.name) <= ${MAX_CLUSTER_NAME_LENGTH} && self.metadata.name.matches('${CLUSTER_NAME_RE}')`,
    message: `metadata.name must be at most ${MAX_CLUSTER_NAME_LENGTH} characters of a-z, 0-9 and "-", starting with a letter (member pods are named <cluster>-<10 characters> and must be DNS labels)`,
  },
];

/** The problem with a cluster's name, or undefined when pods and Services can be named after it. */
export function clusterNameProblem(name: string): string | undefined {
  if (name.length <= MAX_CLUSTER_NAME_LENGTH && new RegExp(CLUSTER_NAME_RE).test(name)) return undefined;
  return CLUSTER_OBJECT_VALIDATIONS[0]?.message;
}

export const DEFAULT_REPOSITORY = "quay.io/coreos/etcd";
/** coreos's default init-container image; the init container waits for the member's DNS name. */
export const DEFAULT_BUSYBOX_IMAGE = "busybox:1.28.0-glibc";
/** coreos documented 1..7 but enforced nothing; more members only slow every write (each waits for a majority). */
export const MAX_CLUSTER_SIZE = 9;
/** Learners (add a member without risking quorum) arrived in etcd 3.4; older clusters cannot be scaled safely. */
export const OLDEST_SUPPORTED_MINOR = "3.4";

/** Pod labels the operator puts on its pods and selects them by (as coreos did). */
export const RESERVED_LABEL_KEYS: readonly string[] = ["app"];
export const RESERVED_LABEL_PREFIX = "etcd_";
/** Pod annotations the operator writes itself. */
export const RESERVED_ANNOTATIONS: readonly string[] = ["etcd.version"];

/**
 * etcd settings the operator passes as flags to every member (or that would move data off the member's
 * volume). etcd ≥ 3.4 refuses to start when an ETCD_* variable shadows a flag, so setting one of these
 * in etcdEnv would leave every new member crash-looping. A trailing `*` matches any suffix.
 */
export const OPERATOR_OWNED_ETCD_ENV: readonly string[] = [
  "ETCD_NAME",
  "ETCD_DATA_DIR",
  "ETCD_WAL_DIR",
  "ETCD_INITIAL_CLUSTER*",
  "ETCD_INITIAL_ADVERTISE_PEER_URLS",
  "ETCD_LISTEN_*",
  "ETCD_ADVERTISE_*",
  "ETCD_CERT_FILE",
  "ETCD_KEY_FILE",
  "ETCD_TRUSTED_CA_FILE",
  "ETCD_CLIENT_CERT_AUTH",
  "ETCD_PEER_CERT_FILE",
  "ETCD_PEER_KEY_FILE",
  "ETCD_PEER_TRUSTED_CA_FILE",
  "ETCD_PEER_CLIENT_CERT_AUTH",
  // Self-signed TLS would turn on TLS behind the operator's back, against the http:// URLs it set.
  "ETCD_AUTO_TLS",
  "ETCD_PEER_AUTO_TLS",
];

/** The same settings as etcd flags (ETCD_PEER_CERT_FILE ↔ --peer-cert-file); a trailing `*` matches any suffix. */
export const OPERATOR_OWNED_ETCD_FLAGS: readonly string[] = OPERATOR_OWNED_ETCD_ENV.map(
  (env) => `--${env.slice("ETCD_".length).toLowerCase().replaceAll("_", "-")}`,
);

/** An extra etcd flag: `--name` or `--name=value`, on one line. */
export const ETCD_ARG_RE = "^--[a-z0-9][a-z0-9-]*(=[^\\n]*)?$";

/** The flag name of an etcdArgs entry ("--quota-backend-bytes=8589934592" → "--quota-backend-bytes"). */
export function etcdArgFlag(arg: string): string {
  const equals = arg.indexOf("=");
  return equals < 0 ? arg : arg.slice(0, equals);
}

export function isOperatorOwnedEtcdFlag(arg: string): boolean {
  const flag = etcdArgFlag(arg);
  return OPERATOR_OWNED_ETCD_FLAGS.some((owned) =>
    owned.endsWith("*") ? flag.startsWith(owned.slice(0, -1)) : flag === owned,
  );
}

export function isOperatorOwnedEtcdEnv(name: string): boolean {
  return OPERATOR_OWNED_ETCD_ENV.some((owned) =>
    owned.endsWith("*") ? name.startsWith(owned.slice(0, -1)) : name === owned,
  );
}

// ---------------------------------------------------------------------------------------------------------
// Patterns shared by the schema (CEL rules the API server runs) and the validator below. RE2-compatible.

/** "3.7.3" or "v3.7.3": the operator pulls `<repository>:v<version>`. */
export const VERSION_RE = "^v?([0-9]+)\\.([0-9]+)\\.([0-9]+)$";
const DOMAIN_COMPONENT = "[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?";
const PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
/** An image name without tag or digest, per the Docker reference grammar: `[host[:port]/]path[/path…]`. */
export const REPOSITORY_RE = `^(?:${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})*(?::[0-9]+)?/)?${PATH_COMPONENT}(?:/${PATH_COMPONENT})*$`;
/** A full image reference: repository plus an optional tag and digest. */
export const IMAGE_RE = `${REPOSITORY_RE.slice(0, -1)}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+:[a-f0-9]{32,})?$`;
const DNS1123_LABEL = "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?";
export const DNS1123_SUBDOMAIN_RE = `^${DNS1123_LABEL}(?:\\.${DNS1123_LABEL})*$`;
const DNS1123_SUBDOMAIN = new RegExp(DNS1123_SUBDOMAIN_RE);
/** A lower-case DNS subdomain of at most 253 characters: the names of Secrets, PriorityClasses, domains. */
export function isDnsSubdomain(value: string): boolean {
  return value.length <= 253 && DNS1123_SUBDOMAIN.test(value);
}
export const LABEL_NAME_RE = "^(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
export const LABEL_VALUE_RE = "^(?:(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/** Kubernetes' classic rule for environment variable names (what a shell and etcd can read back). */
export const ENV_NAME_RE = "^[-._a-zA-Z][-._a-zA-Z0-9]*$";

/** A CEL string literal for `text`. */
function cel(text: string): string {
  return `'${text.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;
}

function ownedEnvRule(): string {
  const exact = OPERATOR_OWNED_ETCD_ENV.filter((n) => !n.endsWith("*"));
  const prefixes = OPERATOR_OWNED_ETCD_ENV.filter((n) => n.endsWith("*")).map((n) => n.slice(0, -1));
  return [
    `!(self.name in [${exact.map(cel).join(", ")}])`,
    ...prefixes.map((p) => `!self.name.startsWith(${cel(p)})`),
  ].join(" && ");
}

/** The CEL rule that keeps etcdArgs off the operator's flags (the API server runs it, RE2). */
function ownedFlagRule(): string {
  const alternatives = OPERATOR_OWNED_ETCD_FLAGS.map((flag) =>
    flag.endsWith("*") ? `${flag.slice(2, -1)}[a-z0-9-]*` : flag.slice(2),
  );
  return `!self.matches(${cel(`^--(${alternatives.join("|")})(=|$)`)})`;
}

// ---------------------------------------------------------------------------------------------------------
// Schema helpers

/**
 * An embedded Kubernetes type (affinity, resources, …): kept whole by the API server
 * (x-kubernetes-preserve-unknown-fields) and checked by Kubernetes when the operator creates the pod,
 * typed in TypeScript as the client library's model.
 */
function embedded<T>(description: string): TUnsafe<T> {
  // An Object kind (not a bare Unsafe) so TypeBox's Value functions can still check it is an object.
  return Type.Unsafe<T>(Type.Object({}, { description, "x-kubernetes-preserve-unknown-fields": true }));
}

function stringMap(description: string, options: Record<string, unknown> = {}) {
  return Type.Record(Type.String(), Type.String(), { description, ...options });
}

// ---------------------------------------------------------------------------------------------------------
// Spec

export const EnvVarSchema = Type.Object(
  {
    name: Type.String({
      description: "Name of the environment variable, e.g. ETCD_AUTO_COMPACTION_RETENTION.",
    }),
    value: Type.Optional(Type.String({ description: "The variable's value. Defaults to the empty string." })),
    valueFrom: Type.Optional(
      embedded<V1EnvVarSource>(
        "Where to read the value from instead of `value`: a Secret or ConfigMap key, or a field of the pod " +
          "(a Kubernetes EnvVarSource).",
      ),
    ),
  },
  {
    description: "An environment variable for the etcd container (a Kubernetes EnvVar).",
    "x-kubernetes-validations": [
      {
        rule: ownedEnvRule(),
        messageExpression: `self.name + ' is set by the operator itself (from the cluster spec) and cannot be given in etcdEnv'`,
      },
      {
        rule: "!(has(self.value) && has(self.valueFrom))",
        message: "give either value or valueFrom, not both",
      },
    ],
  },
);
export type EnvVar = Static<typeof EnvVarSchema>;

export const PodPolicySchema = Type.Object(
  {
    labels: Type.Optional(
      stringMap(
        'Labels added to every etcd pod. The keys "app" and "etcd_*" are reserved: the operator labels its ' +
          "pods with them and finds its pods by them.",
        {
          "x-kubernetes-validations": [
            {
              rule: `self.all(k, !(k in [${RESERVED_LABEL_KEYS.map(cel).join(", ")}]) && !k.startsWith(${cel(RESERVED_LABEL_PREFIX)}))`,
              message: `the labels "app" and "etcd_*" are reserved for the operator's own pod labels`,
            },
          ],
        },
      ),
    ),
    nodeSelector: Type.Optional(
      stringMap(
        "Node labels a node must carry for etcd pods to be scheduled on it (the pod's nodeSelector).",
      ),
    ),
    affinity: Type.Optional(
      embedded<V1Affinity>("Scheduling constraints for the etcd pods (a Kubernetes Affinity)."),
    ),
    antiAffinity: Type.Optional(
      Type.Boolean({
        description:
          "Deprecated: use affinity. When true, no two members of this cluster are scheduled on the same node. " +
          "Without affinity and antiAffinity, members prefer different nodes (a soft anti-affinity on the node's " +
          "hostname), so losing one node costs one member when there are enough nodes.",
      }),
    ),
    resources: Type.Optional(
      embedded<V1ResourceRequirements>(
        "Compute resources (requests and limits) of the etcd container (a Kubernetes ResourceRequirements). " +
          "Applies to members created after a change.",
      ),
    ),
    tolerations: Type.Optional(
      Type.Array(embedded<V1Toleration>("A Kubernetes Toleration."), {
        description: "Tolerations of the etcd pods, to let them run on tainted nodes.",
      }),
    ),
    etcdEnv: Type.Optional(
      Type.Array(EnvVarSchema, {
        description:
          "Environment variables for the etcd container, to configure etcd through ETCD_* variables " +
          "(e.g. ETCD_AUTO_COMPACTION_RETENTION). Variables for the settings the operator passes as flags " +
          `(${OPERATOR_OWNED_ETCD_ENV.join(", ")}) are rejected: etcd refuses to start when a variable ` +
          "shadows a flag. Applies to members created after a change.",
        maxItems: 256,
      }),
    ),
    etcdArgs: Type.Optional(
      Type.Array(
        Type.String({
          pattern: ETCD_ARG_RE,
          // Bounds keep the CEL rule's estimated cost inside the API server's budget.
          maxLength: 1024,
          "x-kubernetes-validations": [
            {
              rule: ownedFlagRule(),
              messageExpression: `self + ' sets a flag the operator sets itself (from the cluster spec); remove it'`,
            },
          ],
        }),
        {
          description:
            'Extra etcd flags for the etcd container, each "--flag=value" or "--flag" (e.g. ' +
            '"--quota-backend-bytes=8589934592", "--auto-compaction-retention=1h"). The flags the operator sets ' +
            `itself (${OPERATOR_OWNED_ETCD_FLAGS.join(", ")}) are rejected. Applies to members created after a change.`,
          maxItems: 64,
        },
      ),
    ),
    priorityClassName: Type.Optional(
      Type.String({
        pattern: DNS1123_SUBDOMAIN_RE,
        maxLength: 253,
        description:
          "Name of the PriorityClass of the etcd pods, e.g. system-cluster-critical for a cluster that other " +
          "workloads depend on. The PriorityClass must exist.",
      }),
    ),
    persistentVolumeClaimSpec: Type.Optional(
      embedded<V1PersistentVolumeClaimSpec>(
        "When given, each member keeps its data on a PersistentVolumeClaim made from this spec (a Kubernetes " +
          "PersistentVolumeClaimSpec) instead of an emptyDir that is lost with the pod.",
      ),
    ),
    annotations: Type.Optional(
      stringMap(
        'Annotations added to every etcd pod. "etcd.version" is reserved: the operator records the member\'s ' +
          "etcd version in it.",
        {
          "x-kubernetes-validations": [
            {
              rule: RESERVED_ANNOTATIONS.map((a) => `!(${cel(a)} in self)`).join(" && "),
              message: `the annotation "etcd.version" is reserved for the operator`,
            },
          ],
        },
      ),
    ),
    busyboxImage: Type.Optional(
      Type.String({
        description:
          "Image of the init container that waits until the member's DNS name resolves; it needs a shell and " +
          `nslookup. Default "${DEFAULT_BUSYBOX_IMAGE}".`,
      }),
    ),
    securityContext: Type.Optional(
      embedded<V1PodSecurityContext>(
        "Security context of the etcd pods (a Kubernetes PodSecurityContext), e.g. runAsUser and fsGroup.",
      ),
    ),
    DNSTimeoutInSecond: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          "How long, in seconds, the init container waits for the member's DNS name before the pod fails. " +
          "0 (the default) waits forever.",
      }),
    ),
    ClusterDomain: Type.Optional(
      Type.String({
        description:
          'The Kubernetes cluster domain appended to member DNS names, e.g. ".cluster.local" (the leading dot ' +
          "is optional). Empty (the default) uses the short form <pod>.<cluster>.<namespace>.svc.",
      }),
    ),
  },
  {
    description:
      "How the operator builds the etcd pods. Changes apply to members created afterwards; running members " +
      "keep the pod they were created with.",
  },
);
export type PodPolicy = Static<typeof PodPolicySchema>;

export const MemberSecretSchema = Type.Object(
  {
    peerSecret: Type.Optional(
      Type.String({
        description:
          "Secret with the certificate each member uses for peer traffic: keys peer.crt, peer.key and " +
          "peer-ca.crt (or tls.crt, tls.key and ca.crt, as cert-manager writes them). Enables TLS between " +
          "members. The certificate must be valid for *.<cluster>.<namespace>.svc and allow server and client " +
          "authentication; peer-ca.crt must hold its CA (during a CA change, old and new).",
      }),
    ),
    serverSecret: Type.Optional(
      Type.String({
        description:
          "Secret with the certificate each member serves clients with: keys server.crt, server.key and " +
          "server-ca.crt (or tls.crt, tls.key and ca.crt). Enables TLS for clients, who must then present a " +
          "certificate signed by a CA in server-ca.crt; needs operatorSecret. The certificate must be valid for " +
          "*.<cluster>.<namespace>.svc and <cluster>-client.<namespace>.svc.",
      }),
    ),
  },
  { description: "Secrets with the TLS certificates of the etcd members." },
);

export const StaticTLSSchema = Type.Object(
  {
    member: Type.Optional(MemberSecretSchema),
    operatorSecret: Type.Optional(
      Type.String({
        description:
          "Secret with the client certificate the operator talks to the members with: keys etcd-client.crt, " +
          "etcd-client.key and etcd-client-ca.crt (or tls.crt, tls.key and ca.crt); etcd-client-ca.crt must " +
          "hold the CA of the members' serving certificates. Required exactly when member.serverSecret is set.",
      }),
    ),
  },
  {
    description:
      "TLS from certificates you create and store in Secrets in the cluster's namespace (by hand or with " +
      "cert-manager). The operator checks them before it builds anything and gives each member a copy; when " +
      "their content changes, members are replaced one at a time with the new certificates. For a new CA, " +
      "change the Secrets in three steps, each rolled out before the next: a CA bundle with old and new CA, " +
      "then the new certificates, then the new CA alone.",
    "x-kubernetes-validations": [
      {
        rule: "has(self.operatorSecret) == (has(self.member) && has(self.member.serverSecret))",
        message:
          "operatorSecret and member.serverSecret go together: with client TLS the operator needs operatorSecret " +
          "to reach the members",
      },
    ],
  },
);

export const TLSPolicySchema = Type.Object(
  { static: Type.Optional(StaticTLSSchema) },
  { description: "TLS for the cluster's peer and client traffic. Without it, etcd speaks plain HTTP." },
);
export type TLSPolicy = Static<typeof TLSPolicySchema>;

/** Defaults of spec.maintenance (an addition to the coreos API). */
export const DEFAULT_DEFRAG_THRESHOLD_PERCENT = 50;
export const DEFAULT_DEFRAG_MINIMUM_BYTES = 64 * 1024 * 1024;
export const MIN_QUOTA_BACKEND_BYTES = 16 * 1024 * 1024;
/** etcd warns above 8 GiB and its bbolt store is tested far less beyond; 64 GiB is a hard ceiling here. */
export const MAX_QUOTA_BACKEND_BYTES = 64 * 1024 * 1024 * 1024;

export const DefragmentationSchema = Type.Object(
  {
    enabled: Type.Optional(
      Type.Boolean({
        description:
          "Whether the operator defragments members whose free share passes thresholdPercent (default true; " +
          "a schedule works either way). A defragmentation " +
          "blocks reads and writes on that one member for its duration (seconds per GiB), so members are done " +
          "one at a time, followers first and the leader last, after leadership moved to a defragmented member.",
      }),
    ),
    thresholdPercent: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 99,
        description:
          "A member is defragmented once this share of its database file is free space (dbSize minus " +
          `dbSizeInUse, over dbSize), in percent. Default ${DEFAULT_DEFRAG_THRESHOLD_PERCENT}.`,
      }),
    ),
    minimumBytes: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          "Members whose database file is smaller than this many bytes are left alone, whatever their free " +
          `share (a small file costs little). Default ${DEFAULT_DEFRAG_MINIMUM_BYTES} (64 MiB).`,
      }),
    ),
    schedule: Type.Optional(
      Type.String({
        maxLength: 100,
        description:
          'A cron schedule in UTC (five fields, e.g. "0 3 * * 0" for Sundays at 03:00): at each of its times every ' +
          "member is defragmented once, whatever its free share, one at a time and the leader last. Members " +
          "created after that time are left out (they start with a compact file). A time missed while the " +
          "operator was down is caught up when it is back; the threshold goes on working between times.",
      }),
    ),
  },
  {
    description:
      "Automatic defragmentation: etcd never gives the space of deleted or compacted revisions back to the " +
      "file system by itself; a defragmentation rewrites a member's database without it.",
  },
);

export const MaintenanceSchema = Type.Object(
  {
    quotaBackendBytes: Type.Optional(
      Type.Integer({
        minimum: MIN_QUOTA_BACKEND_BYTES,
        maximum: MAX_QUOTA_BACKEND_BYTES,
        description:
          "The space quota of each member's database, in bytes (etcd's --quota-backend-bytes; etcd's default " +
          "is 2 GiB). When a member's database reaches it, etcd raises the NOSPACE alarm and refuses every " +
          "write (reads and deletes still work); the operator then compacts the history, defragments every " +
          "member, disarms the alarm and reports it in the NoSpace condition. Applies to members created after " +
          "a change. Cannot be combined with --quota-backend-bytes in pod.etcdArgs.",
      }),
    ),
    defragmentation: Type.Optional(DefragmentationSchema),
  },
  {
    description:
      "Day-2 care of the members' databases (an addition to the coreos API): the space quota and " +
      "automatic defragmentation.",
  },
);
export type Maintenance = Static<typeof MaintenanceSchema>;

export const EtcdClusterSpecSchema = Type.Object(
  {
    size: Type.Integer({
      minimum: 1,
      maximum: MAX_CLUSTER_SIZE,
      description:
        `The number of etcd members, from 1 to ${MAX_CLUSTER_SIZE}. The operator adds or removes one member at ` +
        "a time until the cluster has this many. Odd sizes are recommended: a cluster of n members survives " +
        "the loss of (n-1)/2 of them, so an even size tolerates no more failures than one member fewer.",
    }),
    repository: Type.Optional(
      Type.String({
        default: DEFAULT_REPOSITORY,
        maxLength: 255,
        description:
          "The image repository of etcd, without a tag: members run <repository>:v<version>. It must carry the " +
          `same tags as the official etcd images. Default "${DEFAULT_REPOSITORY}".`,
        "x-kubernetes-validations": [
          {
            rule: `self.matches(${cel(REPOSITORY_RE)})`,
            message: `repository must be an image repository without a tag, like "${DEFAULT_REPOSITORY}" (the operator adds ":v<version>" itself)`,
          },
        ],
      }),
    ),
    version: Type.Optional(
      Type.String({
        default: DEFAULT_ETCD_VERSION,
        maxLength: 64,
        description:
          `The etcd version the members run, e.g. "${DEFAULT_ETCD_VERSION}" (a leading "v" is allowed). Changing ` +
          "it upgrades the members one at a time, one minor version per step. " +
          `Supported: ${supportedMinors().join(", ")}. Default "${DEFAULT_ETCD_VERSION}".`,
        "x-kubernetes-validations": [
          {
            rule: `self.matches(${cel(VERSION_RE)})`,
            message: `version must be an etcd release like "${DEFAULT_ETCD_VERSION}" (a leading "v" is allowed)`,
          },
        ],
      }),
    ),
    paused: Type.Optional(
      Type.Boolean({
        description:
          "When true, the operator stops changing the cluster (no members added, removed or upgraded) until " +
          "it is set back to false. Status is still reported.",
      }),
    ),
    pod: Type.Optional(PodPolicySchema),
    TLS: Type.Optional(TLSPolicySchema),
    maintenance: Type.Optional(MaintenanceSchema),
  },
  { description: "The etcd cluster you want: its size, etcd version and how its pods are built." },
);
export type EtcdClusterSpec = Static<typeof EtcdClusterSpecSchema>;

// ---------------------------------------------------------------------------------------------------------
// Status

export const ClusterPhaseSchema = Type.Union(
  [Type.Literal(""), Type.Literal("Creating"), Type.Literal("Running"), Type.Literal("Failed")],
  {
    description:
      'The coreos-compatible summary: "" before the operator looked at the cluster, "Creating" while the first ' +
      'members start, "Running" once the cluster serves, "Failed" when the operator gave up on it. ' +
      "The conditions say more.",
  },
);
export type ClusterPhase = Static<typeof ClusterPhaseSchema>;

/** A condition of one of the API's objects: `types` lists the types it takes, `of` whose state it is. */
export function conditionSchema(of: string, types: string) {
  return Type.Object(
    {
      type: Type.String({ description: `The condition's type: ${types}.` }),
      status: Type.Union([Type.Literal("True"), Type.Literal("False"), Type.Literal("Unknown")], {
        description: "True, False or Unknown.",
      }),
      reason: Type.Optional(Type.String({ description: "Why the condition has its status, in CamelCase." })),
      message: Type.Optional(Type.String({ description: "A sentence for people about the condition." })),
      lastTransitionTime: Type.Optional(
        Type.String({ description: "When the status last changed (RFC 3339)." }),
      ),
      lastUpdateTime: Type.Optional(
        Type.String({ description: "When the condition was last written (RFC 3339)." }),
      ),
      observedGeneration: Type.Optional(
        Type.Integer({ minimum: 0, description: "The metadata.generation the condition was computed from." }),
      ),
    },
    { description: `One aspect of ${of} state.` },
  );
}

export const ClusterConditionSchema = conditionSchema(
  "the cluster's",
  "Available, Progressing, Degraded or NoSpace (coreos also used Scaling, Upgrading)",
);
export type ClusterCondition = Static<typeof ClusterConditionSchema>;

export const MembersStatusSchema = Type.Object(
  {
    ready: Type.Optional(
      Type.Array(Type.String(), {
        description: "Members that serve requests (their names are their pod names).",
      }),
    ),
    unready: Type.Optional(Type.Array(Type.String(), { description: "Members that do not serve requests." })),
  },
  { description: "The members by readiness." },
);
export type MembersStatus = Static<typeof MembersStatusSchema>;

export const EtcdClusterStatusSchema = Type.Object(
  {
    phase: Type.Optional(ClusterPhaseSchema),
    reason: Type.Optional(
      Type.String({ description: "Why the cluster is in its phase, e.g. why it failed." }),
    ),
    controlPaused: Type.Optional(
      Type.Boolean({ description: "True while spec.paused stops the operator from changing the cluster." }),
    ),
    conditions: Type.Optional(
      Type.Array(ClusterConditionSchema, {
        description:
          "The cluster's conditions: Available, Progressing and Degraded; NoSpace once etcd refused writes " +
          "for its space quota (True since it was first seen, False with when it ended once recovered).",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
      }),
    ),
    size: Type.Optional(
      Type.Integer({ minimum: 0, description: "The number of members the cluster has now." }),
    ),
    selector: Type.Optional(
      Type.String({
        description:
          "The label selector of the member pods, for the scale subresource (e.g. for autoscalers).",
      }),
    ),
    serviceName: Type.Optional(Type.String({ description: "The Service clients reach etcd through." })),
    clientPort: Type.Optional(
      Type.Integer({ description: "The etcd client port, on the Service and the members." }),
    ),
    clientURL: Type.Optional(
      Type.String({
        description: "The URL clients in the cluster reach etcd at, e.g. http://<name>-client.<ns>.svc:2379.",
      }),
    ),
    members: Type.Optional(MembersStatusSchema),
    readyMembers: Type.Optional(Type.Integer({ minimum: 0, description: "How many members are ready." })),
    targetVersion: Type.Optional(
      Type.String({
        description: "The version the members are being upgraded to; empty when not upgrading.",
      }),
    ),
    currentVersion: Type.Optional(
      Type.String({ description: "The etcd version the cluster runs (the oldest of its members)." }),
    ),
    memberVersions: Type.Optional(
      Type.Record(Type.String(), Type.String(), {
        description:
          "The etcd version each member reports it runs, by member (pod) name; during an upgrade, who is done.",
      }),
    ),
    lastSpaceRecovery: Type.Optional(
      Type.Object(
        {
          revision: Type.String({ description: "The revision the history was compacted to." }),
          finishedAt: Type.String({ description: "When the recovery finished (RFC 3339)." }),
          result: Type.Union([Type.Literal("Recovered"), Type.Literal("StillFull")], {
            description:
              "Recovered: the NOSPACE alarm was disarmed. StillFull: the live data alone fills the quota; " +
              "tried again once the store changed (keys deleted).",
          }),
        },
        { description: "The operator's last recovery from etcd's NOSPACE alarm." },
      ),
    ),
    memberDefragmentations: Type.Optional(
      Type.Record(Type.String(), Type.String(), {
        description: "When the operator last defragmented each member (RFC 3339), by member (pod) name.",
      }),
    ),
    lastDefragmentation: Type.Optional(
      Type.Object(
        {
          member: Type.String({ description: "The member (pod) defragmented." }),
          finishedAt: Type.String({ description: "When it finished (RFC 3339)." }),
          durationSeconds: Type.Number({ description: "How long the member was blocked by it." }),
          dbSizeBefore: Type.Integer({ description: "Its database file's size before, in bytes." }),
          dbSizeAfter: Type.Integer({ description: "Its database file's size after, in bytes." }),
        },
        { description: "The operator's last defragmentation of a member." },
      ),
    ),
    observedGeneration: Type.Optional(
      Type.Integer({ minimum: 0, description: "The metadata.generation this status was computed from." }),
    ),
  },
  { description: "What the operator last observed of the cluster. Written by the operator only." },
);
export type EtcdClusterStatus = Static<typeof EtcdClusterStatusSchema>;

export interface EtcdCluster {
  apiVersion: string;
  kind: string;
  metadata: V1ObjectMeta;
  spec: EtcdClusterSpec;
  status?: EtcdClusterStatus;
}

/** The spec with defaults filled in and the version without its "v". */
export interface NormalizedSpec {
  size: number;
  repository: string;
  version: string;
  paused: boolean;
  pod: PodPolicy;
  TLS?: TLSPolicy;
  maintenance: NormalizedMaintenance;
}

/** spec.maintenance with its defaults filled in. */
export interface NormalizedMaintenance {
  quotaBackendBytes?: number;
  defragmentation: { enabled: boolean; thresholdPercent: number; minimumBytes: number; schedule?: string };
}

export type SpecValidation =
  | { ok: true; spec: NormalizedSpec; warnings: string[] }
  | { ok: false; problems: string[] };

/** "3.4" … the newest minor we build: every minor the operator accepts. */
export function supportedMinors(): string[] {
  const newest = parseMinor(minorOf(DEFAULT_ETCD_VERSION));
  const oldest = parseMinor(OLDEST_SUPPORTED_MINOR);
  const minors: string[] = [];
  for (let minor = oldest; minor <= newest; minor++) minors.push(`3.${minor}`);
  return minors;
}

export function parseMinor(minor: string): number {
  return Number(minor.split(".")[1]);
}

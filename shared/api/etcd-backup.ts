// The EtcdBackup API (etcd.database.coreos.com/v1beta2), field for field as coreos's backup operator
// defined it (pkg/apis/etcd/v1beta2/backup_types.go), so its manifests apply unchanged. The storage
// sources are shared with EtcdRestore, which reads back what a backup wrote.

import type { V1ObjectMeta } from "@kubernetes/client-node";
import { type Static, Type } from "@sinclair/typebox";
import { conditionSchema, GROUP } from "./etcd-cluster.ts";

export const BACKUP_KIND = "EtcdBackup";
export const BACKUP_LIST_KIND = "EtcdBackupList";
export const BACKUP_PLURAL = "etcdbackups";
export const BACKUP_SINGULAR = "etcdbackup";
export const BACKUP_CRD_NAME = `${BACKUP_PLURAL}.${GROUP}`;

export const BackupStorageTypeSchema = Type.Union(
  [Type.Literal("S3"), Type.Literal("ABS"), Type.Literal("GCS"), Type.Literal("OSS")],
  {
    description:
      "Where backups are kept: S3 (AWS S3 or any S3-compatible store), ABS (Azure Blob Storage), GCS " +
      "(Google Cloud Storage) or OSS (Alibaba Cloud OSS). The section of the same name (s3, abs, gcs, oss) " +
      "says where exactly.",
  },
);
export type BackupStorageType = Static<typeof BackupStorageTypeSchema>;

const pathDescription = (store: string): string =>
  `The backup's full path: "<bucket>/<path-to-backup-file>", e.g. "mybucket/etcd.backup". ` +
  `For periodic backups it is a prefix; each backup gets a suffix with its revision and time. (${store})`;

export const S3SourceSchema = Type.Object(
  {
    path: Type.String({ minLength: 1, description: pathDescription("S3") }),
    awsSecret: Type.String({
      minLength: 1,
      description:
        "Secret with the AWS credentials: the files `credentials` and `config` (profile `default`), as the " +
        "AWS CLI writes them.",
    }),
    endpoint: Type.Optional(
      Type.String({
        description:
          "The S3 endpoint URL. Empty means AWS; set it to use an S3-compatible store (e.g. MinIO).",
      }),
    ),
    forcePathStyle: Type.Optional(
      Type.Boolean({
        description:
          "Address the bucket in the URL path (https://host/bucket/key) instead of a subdomain; many " +
          "S3-compatible stores need this.",
      }),
    ),
  },
  { description: "An S3 or S3-compatible object store. Used when the storage type is S3." },
);
export type S3Source = Static<typeof S3SourceSchema>;

export const ABSSourceSchema = Type.Object(
  {
    path: Type.String({ minLength: 1, description: pathDescription("Azure container") }),
    absSecret: Type.String({
      minLength: 1,
      description:
        "Secret with the storage account's credentials: keys storage-account and storage-key, and " +
        "storage-endpoint for Azure Stack or an emulator (default https://<account>.blob.core.windows.net).",
    }),
  },
  { description: "Azure Blob Storage. Used when the storage type is ABS." },
);
export type ABSSource = Static<typeof ABSSourceSchema>;

export const GCSSourceSchema = Type.Object(
  {
    path: Type.String({ minLength: 1, description: pathDescription("GCS bucket") }),
    gcpSecret: Type.Optional(
      Type.String({
        description:
          "Secret with a service account's key (key credentials.json) or an OAuth 2 access token (key " +
          "access-token). Without it, the operator's own Google credentials are used (workload identity).",
      }),
    ),
    endpoint: Type.Optional(
      Type.String({
        description:
          "The storage API's URL, e.g. a private endpoint or an emulator. Empty means " +
          "https://storage.googleapis.com. (An addition to the coreos API.)",
      }),
    ),
  },
  { description: "Google Cloud Storage. Used when the storage type is GCS." },
);
export type GCSSource = Static<typeof GCSSourceSchema>;

export const OSSSourceSchema = Type.Object(
  {
    path: Type.String({ minLength: 1, description: pathDescription("OSS bucket") }),
    ossSecret: Type.String({
      minLength: 1,
      description: "Secret with the Alibaba Cloud credentials: keys accessKeyID and accessKeySecret.",
    }),
    endpoint: Type.Optional(
      Type.String({
        description:
          'The OSS endpoint, e.g. "http://oss-cn-hangzhou.aliyuncs.com" (the default); see ' +
          "https://www.alibabacloud.com/help/doc-detail/31837.htm for regions and endpoints.",
      }),
    ),
  },
  { description: "Alibaba Cloud OSS. Used when the storage type is OSS." },
);
export type OSSSource = Static<typeof OSSSourceSchema>;

/**
 * CEL: the section the storage type names must be there. coreos's comment on storageType says it existed
 * because CRDs could not validate this; now they can.
 */
export function storageSectionRule(typeField: string): { rule: string; message: string } {
  const pairs = [
    ["S3", "s3"],
    ["ABS", "abs"],
    ["GCS", "gcs"],
    ["OSS", "oss"],
  ];
  return {
    rule: pairs
      .map(([type, section]) => `(self.${typeField} == '${type}' && has(self.${section}))`)
      .join(" || "),
    message: `${typeField} needs the section of the same name: s3 for S3, abs for ABS, gcs for GCS, oss for OSS`,
  };
}

export const BackupPolicySchema = Type.Object(
  {
    timeoutInSecond: Type.Optional(
      Type.Integer({
        minimum: 0,
        description:
          "The longest a single backup may take, in seconds, before it counts as failed. 0: the default.",
      }),
    ),
    backupIntervalInSecond: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: "How often to take a backup, in seconds. 0 (the default) takes one backup only.",
      }),
    ),
    maxBackups: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: "How many periodic backups to keep; older ones are deleted. 0 (the default) keeps all.",
      }),
    ),
  },
  { description: "How and how often backups are taken." },
);
export type BackupPolicy = Static<typeof BackupPolicySchema>;

export const EtcdBackupSpecSchema = Type.Object(
  {
    etcdEndpoints: Type.Optional(
      Type.Array(Type.String(), {
        description:
          "Client URLs of the etcd cluster to back up, e.g. http://example-etcd-cluster-client:2379. With " +
          "several, the backup is taken from the member with the newest data; all must belong to one cluster.",
      }),
    ),
    storageType: BackupStorageTypeSchema,
    backupPolicy: Type.Optional(BackupPolicySchema),
    s3: Type.Optional(S3SourceSchema),
    abs: Type.Optional(ABSSourceSchema),
    gcs: Type.Optional(GCSSourceSchema),
    oss: Type.Optional(OSSSourceSchema),
    clientTLSSecret: Type.Optional(
      Type.String({
        description:
          "Secret with the client certificate for a cluster that serves clients over TLS: keys " +
          "etcd-client.crt, etcd-client.key and etcd-client-ca.crt.",
      }),
    ),
    verification: Type.Optional(
      Type.Object(
        {
          enabled: Type.Optional(
            Type.Boolean({
              description:
                "After each successful backup, restore it into a throwaway single-member etcd in a pod of " +
                "this namespace (the operator image fetches and checks the object, etcdutl restores it, etcd " +
                "starts on it), compare its revision and key count with what the backup recorded, and report " +
                "the result in status.verification and status.lastVerified. Default false.",
            }),
          ),
          timeoutInSecond: Type.Optional(
            Type.Integer({
              minimum: 30,
              maximum: 86_400,
              description: "How long a verification may take before it counts as failed. Default 600.",
            }),
          ),
        },
        { description: "Verifying backups by restoring them (an addition to the coreos API)." },
      ),
    ),
  },
  {
    description: "Which etcd cluster to back up, where to, and how often.",
    "x-kubernetes-validations": [storageSectionRule("storageType")],
  },
);
export type EtcdBackupSpec = Static<typeof EtcdBackupSpecSchema>;

export const EtcdBackupStatusSchema = Type.Object(
  {
    succeeded: Type.Optional(Type.Boolean({ description: "Whether the last backup succeeded." })),
    reason: Type.Optional(Type.String({ description: "Why the last backup failed." })),
    etcdVersion: Type.Optional(
      Type.String({ description: "The etcd version of the member the backup came from." }),
    ),
    etcdRevision: Type.Optional(
      Type.Integer({ minimum: 0, description: "The etcd revision of the key-value store the backup holds." }),
    ),
    lastSuccessDate: Type.Optional(
      Type.String({ description: "When the last successful backup was taken (RFC 3339)." }),
    ),
    backupPath: Type.Optional(
      Type.String({ description: 'Where the last successful backup is, e.g. "s3://bucket/key".' }),
    ),
    backupSize: Type.Optional(
      Type.Integer({ minimum: 0, description: "Size of the last successful backup in bytes." }),
    ),
    sha256: Type.Optional(
      Type.String({
        description: "SHA-256 of the last successful backup object, hex; also stored next to it.",
      }),
    ),
    durationSeconds: Type.Optional(
      Type.Number({
        minimum: 0,
        description: "How long the last successful backup took, snapshot and upload.",
      }),
    ),
    memberName: Type.Optional(
      Type.String({ description: "The member the last successful backup was taken from." }),
    ),
    lastAttemptDate: Type.Optional(
      Type.String({ description: "When the last backup attempt ended (RFC 3339)." }),
    ),
    keyCount: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: "How many keys the last successful backup holds at its revision, as etcd counted them.",
      }),
    ),
    lastVerified: Type.Optional(
      Type.String({ description: "When a backup last passed its verification (RFC 3339)." }),
    ),
    verification: Type.Optional(
      Type.Object(
        {
          succeeded: Type.Boolean({ description: "Whether the last verification passed." }),
          time: Type.String({ description: "When it ended (RFC 3339)." }),
          backupPath: Type.String({ description: "The backup it restored." }),
          revision: Type.Optional(Type.Integer({ description: "The restored store's revision." })),
          keyCount: Type.Optional(
            Type.Integer({ description: "The keys the restored store holds at the backup's revision." }),
          ),
          durationSeconds: Type.Optional(Type.Number({ description: "How long the verification took." })),
          message: Type.String({ description: "What was checked, or why it failed." }),
        },
        { description: "The last verification of a backup (spec.verification)." },
      ),
    ),
    backupCount: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: "How many backups of a periodic policy the store holds after pruning.",
      }),
    ),
    conditions: Type.Optional(
      Type.Array(conditionSchema("the backup's", "Succeeded"), {
        description: "Succeeded: whether the last attempt worked, with its reason.",
      }),
    ),
  },
  { description: "The outcome of the last backup. Written by the operator only." },
);
export type EtcdBackupStatus = Static<typeof EtcdBackupStatusSchema>;

export interface EtcdBackup {
  apiVersion: string;
  kind: string;
  metadata: V1ObjectMeta;
  spec: EtcdBackupSpec;
  status?: EtcdBackupStatus;
}

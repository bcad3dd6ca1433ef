// The EtcdRestore API (etcd.database.coreos.com/v1beta2), field for field as coreos's restore operator
// defined it (pkg/apis/etcd/v1beta2/restore_types.go): it names an EtcdCluster and a backup, and the
// cluster is recreated from that backup.

import type { V1ObjectMeta } from "@kubernetes/client-node";
import { type Static, Type } from "@sinclair/typebox";
import {
  ABSSourceSchema,
  BackupStorageTypeSchema,
  GCSSourceSchema,
  OSSSourceSchema,
  S3SourceSchema,
  storageSectionRule,
} from "./etcd-backup.ts";
import { GROUP, MAX_CLUSTER_SIZE } from "./etcd-cluster.ts";

export const RESTORE_KIND = "EtcdRestore";
export const RESTORE_LIST_KIND = "EtcdRestoreList";
export const RESTORE_PLURAL = "etcdrestores";
export const RESTORE_SINGULAR = "etcdrestore";
export const RESTORE_CRD_NAME = `${RESTORE_PLURAL}.${GROUP}`;

/**
 * CEL rules on the whole EtcdRestore. coreos served the backup to the new members under the restore's
 * name and looked it up by the cluster's, so the two names must match.
 */
export const RESTORE_OBJECT_VALIDATIONS = [
  {
    rule: "self.metadata.name == self.spec.etcdCluster.name",
    message: "metadata.name must be the same as spec.etcdCluster.name",
  },
];

export const EtcdClusterRefSchema = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      description: "Name of the EtcdCluster, in the namespace of this EtcdRestore.",
    }),
  },
  {
    description:
      "The EtcdCluster to restore. Its metadata and spec are kept; the cluster and all its members are deleted " +
      "and created again from the backup.",
  },
);
export type EtcdClusterRef = Static<typeof EtcdClusterRefSchema>;

export const EtcdRestoreSpecSchema = Type.Object(
  {
    etcdCluster: EtcdClusterRefSchema,
    backupStorageType: BackupStorageTypeSchema,
    s3: Type.Optional(S3SourceSchema),
    abs: Type.Optional(ABSSourceSchema),
    gcs: Type.Optional(GCSSourceSchema),
    oss: Type.Optional(OSSSourceSchema),
  },
  {
    description: "Which EtcdCluster to restore and which backup to restore it from.",
    "x-kubernetes-validations": [storageSectionRule("backupStorageType")],
  },
);
export type EtcdRestoreSpec = Static<typeof EtcdRestoreSpecSchema>;

/** A CRC-32 as backups record it: 8 lower-case hex digits. */
export const CRC32_PATTERN = "^[0-9a-f]{8}$";

export const EtcdRestoreStatusSchema = Type.Object(
  {
    succeeded: Type.Optional(Type.Boolean({ description: "Whether the restore succeeded." })),
    reason: Type.Optional(Type.String({ description: "Why the restore failed." })),
    phase: Type.Optional(
      Type.Union(
        [
          Type.Literal("Verifying"),
          Type.Literal("Staging"),
          Type.Literal("Replacing"),
          Type.Literal("Seeding"),
          Type.Literal("Completed"),
          Type.Literal("Failed"),
        ],
        {
          description:
            "Verifying: the backup is found (and, restoring in place, read and checked); nothing touched yet. " +
            "Staging: the new members download, check and restore the backup while the old members serve. " +
            "Replacing: the old members are deleted. Seeding: the new members start from the backup. Completed; Failed.",
        },
      ),
    ),
    route: Type.Optional(
      Type.Union([Type.Literal("Staged"), Type.Literal("InPlace")], {
        description:
          "Staged: the new members were prepared beside the old ones, which served until every new member had " +
          "its restored data in place. InPlace: the old members stopped first (the members must stay on " +
          "different nodes, or the new ones could not be placed beside them); the operator read and checked " +
          "the backup before that.",
      }),
    ),
    backupPath: Type.Optional(
      Type.String({ description: 'The backup object restored, e.g. "s3://bucket/key".' }),
    ),
    backupSize: Type.Optional(Type.Integer({ minimum: 0, description: "Size of the backup in bytes." })),
    crc32: Type.Optional(
      Type.String({
        pattern: CRC32_PATTERN,
        description:
          "CRC-32 of the backup object as its backup recorded it (8 hex digits): what the new members check as they download it.",
      }),
    ),
    sha256: Type.Optional(
      Type.String({
        description:
          "SHA-256 of the backup object (as its backup recorded it), checked before anything was deleted.",
      }),
    ),
    backupRevision: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: "The etcd revision the backup was taken at, when it was recorded.",
      }),
    ),
    restoredRevision: Type.Optional(
      Type.Integer({ minimum: 0, description: "The revision the restored cluster reported once it served." }),
    ),
    seedMember: Type.Optional(Type.String({ description: "The (first) member started from the backup." })),
    seedMembers: Type.Optional(
      Type.Array(Type.String(), {
        maxItems: MAX_CLUSTER_SIZE,
        description: "Every member started from the backup at once (spec.size of them).",
      }),
    ),
    startTime: Type.Optional(Type.String({ description: "When the restore started (RFC 3339)." })),
    completionTime: Type.Optional(Type.String({ description: "When the restore ended (RFC 3339)." })),
  },
  { description: "The outcome of the restore. Written by the operator only." },
);
export type EtcdRestoreStatus = Static<typeof EtcdRestoreStatusSchema>;

export interface EtcdRestore {
  apiVersion: string;
  kind: string;
  metadata: V1ObjectMeta;
  spec: EtcdRestoreSpec;
  status?: EtcdRestoreStatus;
}

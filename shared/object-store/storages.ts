// The four storages the coreos API names (S3, ABS, GCS, OSS), each described once: the spec section
// that configures it, the field naming its Secret, what its bucket (or container) may be called, and
// how to open it. Opening a store, admission review and the restore seeds' fetch all read this
// table, so a fifth storage is one entry here and one module beside it. Each store's SDK loads on
// first use, so a process that never backs up carries none of them.
import type { ABSSource, BackupStorageType, GCSSource, OSSSource, S3Source } from "../api/etcd-backup.ts";
import type { ObjectStore } from "./types.ts";

/** The storage sections of an EtcdBackup or EtcdRestore spec, by their field names. */
export interface StorageSections {
  s3?: S3Source;
  abs?: ABSSource;
  gcs?: GCSSource;
  oss?: OSSSource;
}
export type SectionName = keyof StorageSections;

/** A Secret's data, decoded; undefined when a storage may run without one (GCS's default credentials). */
export type SecretData = Record<string, string>;

export interface Storage<N extends SectionName> {
  section: N;
  /** The section's field that names the Secret with the credentials. */
  secretField: string;
  /** Whether the Secret may be left out (the SDK's own credentials are used then). */
  secretOptional: boolean;
  /** For messages: "Azure Blob Storage". */
  what: string;
  /** What the part of `path` before the first "/" is called in this store. */
  bucketWord: string;
  /** The store's naming rule for it, checked at admission. */
  bucketPattern: RegExp;
  bucketRule: string;
  open(
    section: NonNullable<StorageSections[N]>,
    bucket: string,
    secret: { name: string; data: SecretData } | undefined,
  ): Promise<ObjectStore>;
}

type Storages = { [T in BackupStorageType]: Storage<(typeof SECTIONS)[T]> };

const SECTIONS = { S3: "s3", ABS: "abs", GCS: "gcs", OSS: "oss" } as const;

/** S3 and OSS share the bucket naming rule; Azure containers allow no "."; GCS allows "_" too. */
const DNS_BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const DNS_BUCKET_RULE = 'bucket names are 3 to 63 lower-case letters, digits, "-" and "."';

export const STORAGES: Storages = {
  S3: {
    section: "s3",
    secretField: "awsSecret",
    secretOptional: false,
    what: "S3 or an S3-compatible store",
    bucketWord: "bucket",
    bucketPattern: DNS_BUCKET,
    bucketRule: DNS_BUCKET_RULE,
    async open(section, bucket, secret) {
      const { s3CredentialsFromSecret } = await import("./credentials.ts");
      const { openS3Store } = await import("./s3.ts");
      return openS3Store({
        bucket,
        credentials: s3CredentialsFromSecret(secret?.name ?? "", secret?.data ?? {}),
        endpoint: section.endpoint,
        forcePathStyle: section.forcePathStyle,
      });
    },
  },
  ABS: {
    section: "abs",
    secretField: "absSecret",
    secretOptional: false,
    what: "Azure Blob Storage",
    bucketWord: "container",
    bucketPattern: /^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$/,
    bucketRule: 'container names are 3 to 63 lower-case letters, digits and single "-"',
    async open(_section, container, secret) {
      const { absCredentialsFromSecret } = await import("./credentials.ts");
      const { openAbsStore } = await import("./abs.ts");
      return openAbsStore({
        container,
        credentials: absCredentialsFromSecret(secret?.name ?? "", secret?.data ?? {}),
      });
    },
  },
  GCS: {
    section: "gcs",
    secretField: "gcpSecret",
    secretOptional: true,
    what: "Google Cloud Storage",
    bucketWord: "bucket",
    bucketPattern: /^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/,
    bucketRule: 'bucket names are 3 to 63 lower-case letters, digits, "-", "_" and "."',
    async open(section, bucket, secret) {
      const { gcsCredentialsFromSecret } = await import("./credentials.ts");
      const { openGcsStore } = await import("./gcs.ts");
      return openGcsStore({
        bucket,
        credentials: secret ? gcsCredentialsFromSecret(secret.name, secret.data) : undefined,
        endpoint: section.endpoint,
      });
    },
  },
  OSS: {
    section: "oss",
    secretField: "ossSecret",
    secretOptional: false,
    what: "Alibaba Cloud OSS",
    bucketWord: "bucket",
    bucketPattern: DNS_BUCKET,
    bucketRule: DNS_BUCKET_RULE,
    async open(section, bucket, secret) {
      const { ossCredentialsFromSecret } = await import("./credentials.ts");
      const { openOssStore } = await import("./oss.ts");
      return openOssStore({
        bucket,
        credentials: ossCredentialsFromSecret(secret?.name ?? "", secret?.data ?? {}),
        endpoint: section.endpoint,
      });
    },
  },
};

export const STORAGE_TYPES = Object.keys(STORAGES) as BackupStorageType[];

export function isStorageType(value: unknown): value is BackupStorageType {
  return typeof value === "string" && Object.hasOwn(STORAGES, value);
}

/** The Secret a storage section names, from the storage's Secret field; undefined when it names none. */
export function secretOf(type: BackupStorageType, section: object): string | undefined {
  const name = (section as Record<string, unknown>)[STORAGES[type].secretField];
  return typeof name === "string" && name !== "" ? name : undefined;
}

/** The "<bucket>/<key>" a storage section's path takes, from a backup's path ("s3://bucket/key"). */
export function bucketPath(path: string): string {
  return path.replace(/^[a-z0-9]+:\/\//, "");
}

/** The section of a spec (EtcdBackup or EtcdRestore) that its storage type names, if it is there. */
export function sectionOf(type: BackupStorageType, spec: StorageSections): object | undefined {
  return spec[STORAGES[type].section];
}

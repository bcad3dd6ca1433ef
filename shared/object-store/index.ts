// Opens the object store an EtcdBackup or EtcdRestore names, with the credentials of its Secret.
// The SDKs load on first use here, in every process: one that never backs up does not carry
// @aws-sdk/client-s3 and ali-oss (the worker role's bundle: 10–11 MiB of RSS and 7 MiB of heap
// less). The backup worker used to load them at start so that a first backup would not pay for
// them mid-stream; measured again (bench/backup.ts, 1.2 GiB, the first backup of the process
// included), the worker's RSS grew by 8.4–40.9 MiB, well inside the 64 MiB budget.
import type { BackupStorageType, OSSSource, S3Source } from "../api/etcd-backup.ts";
import { isDnsSubdomain } from "../api/etcd-cluster.ts";
import { ossCredentialsFromSecret, s3CredentialsFromSecret } from "./credentials.ts";
import { type ObjectStore, ObjectStoreError, splitBucketPath } from "./types.ts";

export interface StorageSections {
  s3?: S3Source;
  oss?: OSSSource;
}

export interface OpenedStore {
  store: ObjectStore;
  /** The object (one-shot) or prefix (periodic) inside the bucket. */
  key: string;
}

/** Reads a Secret's data (decoded); undefined when it does not exist. */
export type SecretReader = (name: string) => Promise<Record<string, string> | undefined>;

async function secretData(readSecret: SecretReader, name: string): Promise<Record<string, string>> {
  // Checked before any request: a name no Secret can have (the schema only asks for a string) put
  // into the GET's URL can be large enough for kube-apiserver to drop the HTTP/2 connection, and
  // the failed backup's status PATCH on it with it, so the user never heard why.
  if (!isDnsSubdomain(name)) {
    const shown = name.length > 80 ? `${name.slice(0, 80)}…(${name.length} characters)` : name;
    throw new ObjectStoreError(
      "InvalidCredentials",
      `"${shown}" is not a valid Secret name: at most 253 lower-case letters, digits, "-" and "."`,
    );
  }
  const data = await readSecret(name);
  if (!data) throw new ObjectStoreError("InvalidCredentials", `secret "${name}" not found`);
  return data;
}

export async function openStore(
  type: BackupStorageType,
  sections: StorageSections,
  readSecret: SecretReader,
): Promise<OpenedStore> {
  if (type === "S3" && sections.s3) {
    const { bucket, key } = splitBucketPath(sections.s3.path);
    const credentials = s3CredentialsFromSecret(
      sections.s3.awsSecret,
      await secretData(readSecret, sections.s3.awsSecret),
    );
    const { openS3Store } = await import("./s3.ts");
    const store = openS3Store({
      bucket,
      credentials,
      endpoint: sections.s3.endpoint,
      forcePathStyle: sections.s3.forcePathStyle,
    });
    return { store, key };
  }
  if (type === "OSS" && sections.oss) {
    const { bucket, key } = splitBucketPath(sections.oss.path);
    const credentials = ossCredentialsFromSecret(
      sections.oss.ossSecret,
      await secretData(readSecret, sections.oss.ossSecret),
    );
    const { openOssStore } = await import("./oss.ts");
    return { store: openOssStore({ bucket, credentials, endpoint: sections.oss.endpoint }), key };
  }
  if (type === "ABS" || type === "GCS") {
    throw new ObjectStoreError(
      "StoreError",
      `storage type ${type} is accepted for compatibility with coreos manifests but not implemented; use S3 (or an S3-compatible endpoint) or OSS`,
    );
  }
  throw new ObjectStoreError("StoreError", `storage type ${type} needs its "${type.toLowerCase()}" section`);
}

export { type ObjectStore, ObjectStoreError, splitBucketPath } from "./types.ts";

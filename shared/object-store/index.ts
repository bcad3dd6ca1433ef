// Opens the object store an EtcdBackup or EtcdRestore names, with the credentials of its Secret.
// The SDKs load on first use (storages.ts), in every process: one that never backs up does not
// carry @aws-sdk/client-s3 and ali-oss (the worker role's bundle: 10–11 MiB of RSS and 7 MiB of heap
// less). The backup worker used to load them at start so that a first backup would not pay for
// them mid-stream; measured again (bench/backup.ts, 1.2 GiB, the first backup of the process
// included), the worker's RSS grew by 8.4–40.9 MiB, well inside the 64 MiB budget.
import type { BackupStorageType } from "../api/etcd-backup.ts";
import { isDnsSubdomain } from "../api/etcd-cluster.ts";
import { type SectionName, STORAGES, type Storage, type StorageSections, secretOf } from "./storages.ts";
import { type ObjectStore, ObjectStoreError, splitBucketPath } from "./types.ts";

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

async function openWith<N extends SectionName>(
  type: BackupStorageType,
  storage: Storage<N>,
  sections: StorageSections,
  readSecret: SecretReader,
): Promise<OpenedStore> {
  const section = sections[storage.section];
  if (!section) {
    throw new ObjectStoreError("StoreError", `storage type ${type} needs its "${storage.section}" section`);
  }
  const { bucket, key } = splitBucketPath(section.path);
  const name = secretOf(type, section);
  if (name === undefined && !storage.secretOptional) {
    throw new ObjectStoreError("InvalidCredentials", `${storage.section}.${storage.secretField} is required`);
  }
  const secret = name === undefined ? undefined : { name, data: await secretData(readSecret, name) };
  return { store: await storage.open(section, bucket, secret), key };
}

export async function openStore(
  type: BackupStorageType,
  sections: StorageSections,
  readSecret: SecretReader,
): Promise<OpenedStore> {
  const storage = STORAGES[type];
  if (!storage) throw new ObjectStoreError("StoreError", `"${String(type)}" is not a storage type`);
  return openWith(type, storage as Storage<SectionName>, sections, readSecret);
}

export type { StorageSections } from "./storages.ts";
export { type ObjectStore, ObjectStoreError, splitBucketPath } from "./types.ts";

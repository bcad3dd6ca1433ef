// One small interface over the object stores backups go to (S3 and S3-compatible stores, Azure
// Blob Storage, Google Cloud Storage, Aliyun OSS), so the backup and restore functions are written once. Every method streams: snapshots can
// be many GiB and the worker's memory must stay flat.
import type { Readable } from "node:stream";
import type { BackupStorageType } from "../api/etcd-backup.ts";

export interface StoredObject {
  key: string;
  size: number;
  lastModified?: Date;
}

export interface ObjectStore {
  readonly kind: BackupStorageType;
  readonly bucket: string;
  /**
   * Streams body to key; resolves once the store has the whole object. `size`, when the caller
   * knows it before the first byte, lets an S3 store take the object in one request.
   */
  upload(key: string, body: Readable, size?: number): Promise<void>;
  /** A small object written in one request (the backup's metadata file). */
  putText(key: string, text: string): Promise<void>;
  download(key: string): Promise<Readable>;
  /** undefined when the object does not exist. */
  head(key: string): Promise<StoredObject | undefined>;
  /** Every object under prefix, all pages. */
  list(prefix: string): Promise<StoredObject[]>;
  remove(keys: string[]): Promise<void>;
  close(): void;
}

/**
 * What went wrong, in the words a user can act on. `code` is stable for conditions and tests;
 * the message names the store and the object.
 */
export type ObjectStoreErrorCode =
  | "InvalidPath"
  | "InvalidCredentials"
  | "AccessDenied"
  | "NoSuchBucket"
  | "NoSuchKey"
  | "Unreachable"
  /** A create-only write found an object at its key: another writer came first. */
  | "ObjectExists"
  | "StoreError";

export class ObjectStoreError extends Error {
  override name = "ObjectStoreError";
  readonly code: ObjectStoreErrorCode;
  constructor(code: ObjectStoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** "mybucket/dir/etcd.backup" → bucket "mybucket", key "dir/etcd.backup" (coreos's path format). */
export function splitBucketPath(path: string): { bucket: string; key: string } {
  const slash = path.indexOf("/");
  const bucket = slash > 0 ? path.slice(0, slash) : "";
  const key = slash > 0 ? path.slice(slash + 1) : "";
  if (!bucket || !key || key.endsWith("/")) {
    throw new ObjectStoreError(
      "InvalidPath",
      `path "${path}" must be "<bucket>/<path-to-backup-file>", e.g. "mybucket/etcd.backup"`,
    );
  }
  return { bucket, key };
}

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "ConnectionTimeoutError",
  "ResponseTimeoutError",
  "RequestError",
  "TimeoutError",
]);

/** Whether an error (or one of its causes) is a network failure rather than an answer from the store. */
export function isNetworkError(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && NETWORK_CODES.has(code)) return true;
    if (NETWORK_CODES.has(e.name)) return true;
    if (e instanceof AggregateError && e.errors.some(isNetworkError)) return true;
  }
  return false;
}

/** An error's first line, for messages that name the store and the object. */
export function errorLine(error: unknown): string {
  return error instanceof Error ? (error.message.split("\n")[0] ?? "") : String(error);
}

/** A network failure reaching the store, in the words every store uses. */
export function unreachable(where: string, error: unknown): ObjectStoreError {
  return new ObjectStoreError("Unreachable", `${where}: the store is unreachable (${errorLine(error)})`, {
    cause: error,
  });
}

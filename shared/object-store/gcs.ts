// Google Cloud Storage through @google-cloud/storage. A backup is a resumable upload sent as one
// streamed request (no chunk size: Google's advice unless a request must be bounded), holding only
// the buffer in flight; after a broken connection the SDK asks the store how far it got and
// resumes, or fails rather than skip bytes. The object appears under its name only when the whole
// stream is in, checked against the MD5 the store computed. (Chunks of 8 MiB were tried first: each
// chunk is a request the store answers before the next, and the local GCS server re-hashes the
// whole upload per chunk, so a 1.2 GiB backup did not finish in 5 minutes.) Credentials are coreos's
// GCS Secret (a service account key or an access token), or without a Secret the SDK's default
// application credentials (workload identity, the metadata server).
import type { Readable } from "node:stream";
import { ApiError, Storage, type StorageOptions } from "@google-cloud/storage";
import { OAuth2Client } from "google-auth-library";
import type { GcsCredentials } from "./credentials.ts";
import {
  errorLine,
  isNetworkError,
  type ObjectStore,
  ObjectStoreError,
  type StoredObject,
  unreachable,
} from "./types.ts";

export interface GcsStoreOptions {
  bucket: string;
  credentials?: GcsCredentials;
  /** Another endpoint than https://storage.googleapis.com (a private endpoint, an emulator). */
  endpoint?: string;
}

/** The HTTP status of an SDK error: ApiError's `code`, or the status of a GaxiosError (uploads). */
function httpStatus(error: unknown): number | undefined {
  if (error instanceof ApiError && typeof error.code === "number") return error.code;
  const status = (error as { status?: unknown; response?: { status?: unknown } }).response?.status;
  return typeof status === "number" ? status : undefined;
}

/**
 * `missing` says what a 404 means for the operation: listing and uploading name only the bucket,
 * reading and looking up an object name the object (GCS's message says which when it is the bucket).
 */
function explain(error: unknown, where: string, missing: "bucket" | "object"): ObjectStoreError {
  if (error instanceof ObjectStoreError) return error;
  const status = httpStatus(error);
  const message = errorLine(error);
  if (status === 404)
    return missing === "bucket" || /bucket does not exist/i.test(message)
      ? new ObjectStoreError("NoSuchBucket", `${where}: the bucket does not exist`, { cause: error })
      : new ObjectStoreError("NoSuchKey", `${where}: no such object`, { cause: error });
  if (status === 401)
    return new ObjectStoreError("InvalidCredentials", `${where}: the store refused the credentials`, {
      cause: error,
    });
  if (status === 403)
    return new ObjectStoreError("AccessDenied", `${where}: access denied (${message})`, { cause: error });
  if (status !== undefined)
    return new ObjectStoreError("StoreError", `${where}: ${status}: ${message}`, { cause: error });
  if (isNetworkError(error)) return unreachable(where, error);
  return new ObjectStoreError("StoreError", `${where}: ${message}`, { cause: error });
}

function storageOptions(options: GcsStoreOptions): StorageOptions {
  const endpoint = options.endpoint ? { apiEndpoint: options.endpoint.replace(/\/+$/, "") } : {};
  // With an endpoint of their own, the SDK sends no credentials unless told to; a user who gave
  // a Secret wants them sent.
  const auth = options.endpoint && options.credentials ? { useAuthWithCustomEndpoint: true } : {};
  const credentials = options.credentials;
  if (credentials?.kind === "access-token") {
    const client = new OAuth2Client();
    client.setCredentials({ access_token: credentials.token });
    return { ...endpoint, ...auth, authClient: client };
  }
  if (credentials?.kind === "service-account") {
    return {
      ...endpoint,
      ...auth,
      projectId: credentials.projectId,
      credentials: { client_email: credentials.clientEmail, private_key: credentials.privateKey },
    };
  }
  return endpoint;
}

export function openGcsStore(options: GcsStoreOptions): ObjectStore {
  const storage = new Storage({
    ...storageOptions(options),
    retryOptions: { autoRetry: true, maxRetries: 3 },
  });
  const bucket = storage.bucket(options.bucket);
  const at = (key: string) => `gcs://${options.bucket}/${key}`;
  return {
    kind: "GCS",
    bucket: options.bucket,
    async upload(key, body: Readable) {
      const sink = bucket.file(key).createWriteStream({
        resumable: true,
        contentType: "application/octet-stream",
        validation: "md5",
      });
      try {
        await new Promise<void>((resolve, reject) => {
          body.once("error", (error) => sink.destroy(error));
          sink.once("error", reject);
          sink.once("finish", resolve);
          body.pipe(sink);
        });
      } catch (error) {
        body.destroy();
        throw explain(error, `upload to ${at(key)}`, "bucket");
      }
    },
    async putText(key, text) {
      try {
        await bucket.file(key).save(text, { resumable: false, contentType: "application/json" });
      } catch (error) {
        throw explain(error, `write ${at(key)}`, "bucket");
      }
    },
    async download(key) {
      const file = bucket.file(key);
      try {
        // Asked first, so that a missing object is an error here rather than on the stream.
        await file.getMetadata();
      } catch (error) {
        throw explain(error, `read ${at(key)}`, "object");
      }
      // The restore checks the bytes itself (CRC-32 or SHA-256 recorded with the backup).
      return file.createReadStream({ validation: false });
    },
    async head(key) {
      try {
        const [metadata] = await bucket.file(key).getMetadata();
        return {
          key,
          size: Number(metadata.size ?? 0),
          lastModified: metadata.updated ? new Date(metadata.updated) : undefined,
        };
      } catch (error) {
        const explained = explain(error, `look up ${at(key)}`, "object");
        if (explained.code === "NoSuchKey") return undefined;
        throw explained;
      }
    },
    async list(prefix) {
      try {
        const [files] = await bucket.getFiles({ prefix, autoPaginate: true });
        return files.map(
          (file): StoredObject => ({
            key: file.name,
            size: Number(file.metadata.size ?? 0),
            lastModified: file.metadata.updated ? new Date(file.metadata.updated) : undefined,
          }),
        );
      } catch (error) {
        throw explain(error, `list ${at(prefix)}*`, "bucket");
      }
    },
    async remove(keys) {
      for (const key of keys) {
        try {
          await bucket.file(key).delete({ ignoreNotFound: true });
        } catch (error) {
          throw explain(error, `delete ${at(key)}`, "object");
        }
      }
    },
    close() {},
  };
}

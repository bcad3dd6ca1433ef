// Azure Blob Storage through @azure/storage-blob, with a storage account's shared key (coreos's
// ABS Secret). A backup is a block blob written by uploadStream: blocks of BLOCK_SIZE, at most
// CONCURRENCY of them in memory and in flight, committed once the stream ends, so a multi-GiB
// snapshot costs a bounded amount of memory and nothing is visible under the name before the commit.
// (Four 8 MiB blocks grew the worker by up to 78 MiB per 1.2 GiB backup, over the 64 MiB budget.)
import type { Readable } from "node:stream";
import {
  type BlobDownloadResponseParsed,
  BlobServiceClient,
  RestError,
  StorageSharedKeyCredential,
} from "@azure/storage-blob";
import type { AbsCredentials } from "./credentials.ts";
import {
  errorLine,
  isNetworkError,
  type ObjectStore,
  ObjectStoreError,
  type StoredObject,
  unreachable,
} from "./types.ts";

const BLOCK_SIZE = 4 * 1024 * 1024;
const CONCURRENCY = 3;

export interface AbsStoreOptions {
  container: string;
  credentials: AbsCredentials;
}

function explain(error: unknown, where: string): ObjectStoreError {
  if (error instanceof ObjectStoreError) return error;
  if (error instanceof RestError) {
    const code = error.code ?? "";
    const answer = (errorCode: string) =>
      // The service's code is in a header; the SDK keeps it on the response.
      error.response?.headers.get("x-ms-error-code") === errorCode || code === errorCode;
    if (answer("ContainerNotFound"))
      return new ObjectStoreError("NoSuchBucket", `${where}: the container does not exist`, { cause: error });
    if (answer("BlobNotFound") || (error.statusCode === 404 && where.startsWith("look up")))
      return new ObjectStoreError("NoSuchKey", `${where}: no such blob`, { cause: error });
    // Azure says AuthenticationFailed for a bad signature; Azurite AuthorizationFailure, with
    // Azure's words.
    if (
      answer("AuthenticationFailed") ||
      answer("InvalidAuthenticationInfo") ||
      /failed to authenticate/i.test(error.message)
    )
      return new ObjectStoreError(
        "InvalidCredentials",
        `${where}: the storage account refused the credentials (check storage-account and storage-key)`,
        { cause: error },
      );
    if (error.statusCode === 403)
      return new ObjectStoreError("AccessDenied", `${where}: access denied`, { cause: error });
    if (isNetworkError(error) || error.statusCode === undefined) return unreachable(where, error);
    return new ObjectStoreError("StoreError", `${where}: ${code || error.statusCode}: ${errorLine(error)}`, {
      cause: error,
    });
  }
  if (isNetworkError(error)) return unreachable(where, error);
  return new ObjectStoreError("StoreError", `${where}: ${errorLine(error)}`, { cause: error });
}

/** The account's blob endpoint: the Secret's storage-endpoint, else the public cloud's. */
export function absEndpoint(credentials: AbsCredentials): string {
  return (credentials.endpoint ?? `https://${credentials.account}.blob.core.windows.net`).replace(/\/+$/, "");
}

function bodyOf(answer: BlobDownloadResponseParsed, where: string): Readable {
  const body = answer.readableStreamBody;
  if (!body) throw new ObjectStoreError("StoreError", `${where}: the store answered without a body`);
  return body as Readable;
}

export function openAbsStore(options: AbsStoreOptions): ObjectStore {
  const { container, credentials } = options;
  const service = new BlobServiceClient(
    absEndpoint(credentials),
    new StorageSharedKeyCredential(credentials.account, credentials.key),
    // A stalled connection fails the request instead of hanging the backup; the SDK retries it.
    { retryOptions: { maxTries: 4, tryTimeoutInMs: 120_000 } },
  );
  const client = service.getContainerClient(container);
  const at = (key: string) => `abs://${container}/${key}`;
  return {
    kind: "ABS",
    bucket: container,
    async upload(key, body: Readable) {
      try {
        await client.getBlockBlobClient(key).uploadStream(body, BLOCK_SIZE, CONCURRENCY, {
          blobHTTPHeaders: { blobContentType: "application/octet-stream" },
        });
      } catch (error) {
        throw explain(error, `upload to ${at(key)}`);
      }
    },
    async putText(key, text) {
      try {
        await client.getBlockBlobClient(key).upload(text, Buffer.byteLength(text), {
          blobHTTPHeaders: { blobContentType: "application/json" },
        });
      } catch (error) {
        throw explain(error, `write ${at(key)}`);
      }
    },
    async download(key) {
      try {
        return bodyOf(await client.getBlobClient(key).download(), `read ${at(key)}`);
      } catch (error) {
        throw explain(error, `read ${at(key)}`);
      }
    },
    async head(key) {
      try {
        const properties = await client.getBlobClient(key).getProperties();
        return { key, size: properties.contentLength ?? 0, lastModified: properties.lastModified };
      } catch (error) {
        const explained = explain(error, `look up ${at(key)}`);
        if (explained.code === "NoSuchKey") return undefined;
        throw explained;
      }
    },
    async list(prefix) {
      const found: StoredObject[] = [];
      try {
        for await (const item of client.listBlobsFlat({ prefix })) {
          found.push({
            key: item.name,
            size: item.properties.contentLength ?? 0,
            lastModified: item.properties.lastModified,
          });
        }
      } catch (error) {
        throw explain(error, `list ${at(prefix)}*`);
      }
      return found;
    },
    async remove(keys) {
      for (const key of keys) {
        try {
          await client.getBlobClient(key).deleteIfExists();
        } catch (error) {
          throw explain(error, `delete ${at(key)}`);
        }
      }
    },
    close() {},
  };
}

// S3 and S3-compatible stores (MinIO, versitygw, SeaweedFS, Ceph RGW…) through @aws-sdk/client-s3. An
// upload of known size (≤ 5 GiB) is one streamed PutObject (s3-put.ts); any other is multipart with
// two reused 5 MiB part buffers (s3-multipart.ts). Memory stays flat either way.
import { Agent as HttpAgent } from "node:http";
import { Agent as HttpsAgent } from "node:https";
import type { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from "@aws-sdk/client-s3";
import { CommitRefusedError } from "../commit-gate.ts";
import type { S3Credentials } from "./credentials.ts";
import { MIN_PART_SIZE, type UploadShape, uploadStream } from "./s3-multipart.ts";
import { MAX_PUT_SIZE, putStream } from "./s3-put.ts";
import { isNetworkError, type ObjectStore, ObjectStoreError, type StoredObject } from "./types.ts";

/**
 * Parts of 5 MiB, two buffers: a part uploads while the next fills, and two are in flight when the
 * stream is faster than the store. More buffers would help a distant store (one part per round
 * trip caps a backup at 50 MiB/s at 100 ms), but on a store-bound local run 3 buffers grew the
 * worker's RSS by 41-98 MiB during a 1 GiB backup (2: 36 MiB; the budget is 64 MiB).
 */
export const UPLOAD_SHAPE: UploadShape = { partSize: MIN_PART_SIZE, buffers: 2 };

export interface S3StoreOptions {
  bucket: string;
  credentials: S3Credentials;
  /** Empty: AWS. */
  endpoint?: string;
  forcePathStyle?: boolean;
}

function explain(error: unknown, where: string): ObjectStoreError {
  if (error instanceof ObjectStoreError) return error;
  if (error instanceof S3ServiceException) {
    const status = error.$metadata.httpStatusCode;
    switch (error.name) {
      case "NoSuchBucket":
        return new ObjectStoreError("NoSuchBucket", `${where}: the bucket does not exist`, { cause: error });
      case "NoSuchKey":
      case "NotFound":
        return new ObjectStoreError("NoSuchKey", `${where}: no such object`, { cause: error });
      case "InvalidAccessKeyId":
      case "SignatureDoesNotMatch":
      case "InvalidToken":
      case "ExpiredToken":
        return new ObjectStoreError(
          "InvalidCredentials",
          `${where}: the store refused the credentials (${error.name})`,
          { cause: error },
        );
      case "AccessDenied":
      case "Forbidden":
        return new ObjectStoreError("AccessDenied", `${where}: access denied`, { cause: error });
    }
    if (status === 412)
      return new ObjectStoreError("ObjectExists", `${where}: another writer put an object there meanwhile`, {
        cause: error,
      });
    if (status === 403)
      return new ObjectStoreError("AccessDenied", `${where}: access denied (${error.name})`, {
        cause: error,
      });
    return new ObjectStoreError("StoreError", `${where}: ${error.name}: ${error.message}`, { cause: error });
  }
  if (isNetworkError(error)) {
    return new ObjectStoreError("Unreachable", `${where}: the store is unreachable (${describe(error)})`, {
      cause: error,
    });
  }
  return new ObjectStoreError("StoreError", `${where}: ${describe(error)}`, { cause: error });
}

function describe(error: unknown): string {
  if (error instanceof AggregateError) return error.errors.map(describe).join("; ");
  return error instanceof Error
    ? `${(error as { code?: string }).code ?? error.name}: ${error.message}`
    : String(error);
}

/**
 * Upload parts go with `x-amz-content-sha256: UNSIGNED-PAYLOAD`, as the AWS CLI sends them over
 * HTTPS: over plain HTTP the SDK would otherwise hash every part for its signature (SigV4) and the
 * store hash it again to check it, two SHA-256 passes over the whole backup on the cores etcd and
 * the store share (measured: ~1.5 CPU-s of the client's and ~0.7 of the store's per 1.2 GiB). The
 * bytes are still proven: the backup's own SHA-256 goes into its metadata object (signed with its
 * payload, like every other request), and a restore checks the bytes against it before they are used.
 */
function hasHeaders(request: unknown): request is { headers: Record<string, string> } {
  return (
    typeof request === "object" &&
    request !== null &&
    "headers" in request &&
    typeof request.headers === "object" &&
    request.headers !== null
  );
}

export function unsignedParts(client: S3Client): void {
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const request = args.request;
      if (context.commandName === "UploadPartCommand" && hasHeaders(request))
        request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD";
      return next(args);
    },
    { step: "build", name: "eopUnsignedUploadParts" },
  );
}

/** How often and how far apart removeBrokenPut looks again (see there). */
const BROKEN_PUT_CHECKS = 15;
const BROKEN_PUT_CHECK_MS = 200;

const SILENT = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * The high-water mark of every socket to the store (Node's default is 64 KiB). An upload's body
 * corks its request for each event-loop turn (turn-batched-transform.ts), and a batch ends where
 * the socket reports back-pressure: at 64 KiB each batch was one writev of ~64 KiB, then a pause
 * until it drained, though a turn can hand on more (libuv reads a socket up to 32 times per poll;
 * not measured). At 1 MiB the turn's chunks leave in fewer, larger writes, and the store reads
 * them in fewer wake-ups. Beside a local etcd and the local S3 store, 1.2 GiB, runs alternated:
 * 3.85–4.26 s, store 1.2–1.3 CPU-s, against 4.30–4.58 s, store 1.8–2.0 CPU-s with these agents at
 * 64 KiB (the commit that made it has the runs). Memory stays bounded: a socket buffers at most this
 * much of an upload, and a download's socket stops reading at this much unread.
 */
const STORE_SOCKET_HIGH_WATER_MARK = 1024 * 1024;

/**
 * Agents, not agent options: given options, the SDK still sends a request that expects
 * `100-continue` (every PutObject over 2 MiB) through an agent of its own, built without them.
 * Given Agents it uses them for every request, sends such a body without waiting for the 100 (one
 * round trip less), and still destroys them with the client. The keep-alive and socket limit are
 * the SDK's own defaults. net.Socket and tls.TLSSocket both take highWaterMark from the options.
 */
const STORE_AGENT_OPTIONS = { keepAlive: true, maxSockets: 50, highWaterMark: STORE_SOCKET_HIGH_WATER_MARK };

/** The client every S3 store call goes through, configured for streamed backups. */
export function createS3Client(options: S3StoreOptions): S3Client {
  const client = new S3Client({
    region: options.credentials.region ?? "us-east-1",
    endpoint: options.endpoint || undefined,
    forcePathStyle: options.forcePathStyle ?? Boolean(options.endpoint),
    credentials: {
      accessKeyId: options.credentials.accessKeyId,
      secretAccessKey: options.credentials.secretAccessKey,
      sessionToken: options.credentials.sessionToken,
    },
    maxAttempts: 3,
    // The SDK writes one warning to the console when a streamed upload fails (it cannot retry a
    // stream); our caller reports that failure itself, once, in the worker's structured log.
    logger: SILENT,
    // The SDK's default adds a CRC32 of every part (pure JavaScript, over each byte) and checks
    // one on every download. The backup carries its own SHA-256, recorded at upload and verified
    // before a restore uses the bytes; SigV4 signs each part's SHA-256 over plain HTTP and TLS
    // covers HTTPS. A second checksum would only cost the worker CPU the store needs.
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
    requestHandler: {
      connectionTimeout: 5_000,
      requestTimeout: 60_000,
      httpAgent: new HttpAgent(STORE_AGENT_OPTIONS),
      httpsAgent: new HttpsAgent(STORE_AGENT_OPTIONS),
    },
  });
  unsignedParts(client);
  return client;
}

/** `client` defaults to createS3Client's; a test passes one to watch the requests. */
export function openS3Store(
  options: S3StoreOptions,
  client: S3Client = createS3Client(options),
): ObjectStore {
  const { bucket } = options;
  const at = (key: string) => `s3://${bucket}/${key}`;
  /** undefined when the object does not exist. */
  const head = async (key: string): Promise<StoredObject | undefined> => {
    try {
      const answer = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
      return { key, size: answer.ContentLength ?? 0, lastModified: answer.LastModified };
    } catch (error) {
      const explained = explain(error, `look up ${at(key)}`);
      // HEAD has no body, so a missing bucket also comes back as a bare 404.
      if (explained.code === "NoSuchKey") return undefined;
      throw explained;
    }
  };
  /**
   * Deletes what a store kept of a put that broke off. The store may write it only once it has seen
   * the connection close, after a first delete (CI saw a truncated object survive one): look again
   * every moment, deleting what is there, until two looks in a row find nothing or ~3 s have passed.
   */
  const removeBrokenPut = async (key: string): Promise<void> => {
    const remove = () =>
      client.send(new DeleteObjectCommand({ Bucket: bucket, Key: key })).catch(() => undefined);
    await remove();
    for (let look = 0, emptyLooks = 0; look < BROKEN_PUT_CHECKS && emptyLooks < 2; look++) {
      await sleep(BROKEN_PUT_CHECK_MS);
      // A look that fails counts as finding something: the store may still be writing.
      if ((await head(key).catch(() => true)) === undefined) emptyLooks++;
      else {
        emptyLooks = 0;
        await remove();
      }
    }
  };
  return {
    kind: "S3",
    bucket,
    async upload(key, body: Readable, size?: number) {
      try {
        // One PutObject goes only to a key that holds nothing, and only if it still does when the
        // store commits it: a store may keep what arrived of a put that broke off (versitygw does,
        // for an unsigned payload), which would replace a good backup with a truncated one. A
        // multipart upload replaces an object only once completed.
        if (size !== undefined && size <= MAX_PUT_SIZE && (await head(key)) === undefined) {
          await putStream(client, { bucket, key, createOnly: true }, body, size).catch(
            async (error: unknown) => {
              // The key held nothing: whatever the store kept of the broken request goes. Unless
              // another writer owns the key now (the upload's end was refused, or its object came
              // first): what is there is theirs.
              const explained = explain(error, `upload to ${at(key)}`);
              if (!(error instanceof CommitRefusedError) && explained.code !== "ObjectExists")
                await removeBrokenPut(key);
              throw explained;
            },
          );
        } else await uploadStream(client, { bucket, key }, body, UPLOAD_SHAPE);
      } catch (error) {
        throw explain(error, `upload to ${at(key)}`);
      }
    },
    async putText(key, text) {
      try {
        await client.send(
          new PutObjectCommand({ Bucket: bucket, Key: key, Body: text, ContentType: "application/json" }),
        );
      } catch (error) {
        throw explain(error, `write ${at(key)}`);
      }
    },
    async download(key) {
      try {
        const answer = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        const body = answer.Body;
        if (!body || !("pipe" in body)) throw new Error("no body in the answer");
        return body as Readable;
      } catch (error) {
        throw explain(error, `read ${at(key)}`);
      }
    },
    head,
    async list(prefix) {
      const found: StoredObject[] = [];
      let token: string | undefined;
      try {
        do {
          const page = await client.send(
            new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
          );
          for (const item of page.Contents ?? []) {
            if (item.Key)
              found.push({ key: item.Key, size: item.Size ?? 0, lastModified: item.LastModified });
          }
          token = page.IsTruncated ? page.NextContinuationToken : undefined;
        } while (token);
      } catch (error) {
        throw explain(error, `list ${at(prefix)}*`);
      }
      return found;
    },
    async remove(keys) {
      for (let i = 0; i < keys.length; i += 1000) {
        const chunk = keys.slice(i, i + 1000);
        try {
          const answer = await client.send(
            new DeleteObjectsCommand({
              Bucket: bucket,
              Delete: { Objects: chunk.map((Key) => ({ Key })), Quiet: true },
            }),
          );
          const failed = answer.Errors?.[0];
          if (failed) throw new Error(`${failed.Key}: ${failed.Code} ${failed.Message}`);
        } catch (error) {
          throw explain(error, `delete from s3://${bucket}`);
        }
      }
    },
    close() {
      client.destroy();
    },
  };
}

// One streamed PutObject for a body whose length is known before it starts (a backup: etcd's first
// snapshot message says how many bytes follow). Against a multipart upload it spares the store the
// pass that joins the parts into the object (versitygw's posix backend copies every byte again on
// CompleteMultipartUpload, as a filesystem-backed store must) and a request per 5 MiB part.
// Memory stays flat: the body is piped into the request with back-pressure.
// What it gives up: in a multipart upload a failed part is retried alone; here the SDK never
// retries a streamed body, so a failure fails the whole put (a backup job then retries from a new
// snapshot). Larger objects than one PutObject may hold go multipart (s3-multipart.ts).
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { TurnBatchedTransform } from "./turn-batched-transform.ts";

/** S3's limit on one PutObject. */
export const MAX_PUT_SIZE = 5 * 1024 ** 3;

export class StreamLengthError extends Error {
  override name = "StreamLengthError";
}

/**
 * Streams body to the store as one object of exactly `size` bytes. A body that errors aborts the
 * request and its error is the one thrown; a body longer or shorter than `size` aborts it too (the
 * request would otherwise send a short object or leave bytes on the connection).
 */
export async function putStream(
  client: S3Client,
  target: {
    bucket: string;
    key: string;
    contentType?: string;
    /** Only if no object is at the key when the store commits the put (If-None-Match: *). */
    createOnly?: boolean;
  },
  body: Readable,
  size: number,
): Promise<{ bytes: number }> {
  if (!Number.isSafeInteger(size) || size < 0 || size > MAX_PUT_SIZE)
    throw new RangeError(`one PutObject takes 0 to ${MAX_PUT_SIZE} bytes, not ${size}`);
  const abort = new AbortController();
  let bytes = 0;
  // Counts what passes; a listener on the body itself would set it flowing before the SDK reads it.
  // Each turn's chunks leave in one writev (turn-batched-transform.ts).
  const counted = new TurnBatchedTransform({
    transform(chunk: Buffer, _encoding, done) {
      bytes += chunk.length;
      if (bytes > size) done(new StreamLengthError(`the stream ran past the ${size} bytes announced`));
      else done(null, chunk);
    },
    flush(done) {
      if (bytes === size) done();
      else done(new StreamLengthError(`the stream ended after ${bytes} of the ${size} bytes announced`));
    },
  });
  // Either side failing ends both; the request is aborted with the reason.
  pipeline(body, counted).catch((error: unknown) => abort.abort(error));
  try {
    await client.send(
      new PutObjectCommand({
        Bucket: target.bucket,
        Key: target.key,
        Body: counted,
        ContentLength: size,
        ContentType: target.contentType ?? "application/octet-stream",
        IfNoneMatch: target.createOnly ? "*" : undefined,
      }),
      { abortSignal: abort.signal },
    );
    return { bytes };
  } catch (error) {
    // The body's own failure (the snapshot broke off, or its length was wrong) says more than the
    // request it aborted.
    const reason: unknown = abort.signal.aborted ? abort.signal.reason : error;
    // A request the store refused leaves the body unread: ending it ends its producer's pipeline.
    counted.destroy(reason instanceof Error ? reason : undefined);
    throw reason;
  }
}

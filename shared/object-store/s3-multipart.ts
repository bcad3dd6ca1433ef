// A multipart upload of a stream into S3 with two part buffers allocated once and reused: one
// fills from the stream while the other uploads. @aws-sdk/lib-storage allocates (and copies into)
// a new buffer per part; over a multi-GiB snapshot that garbage is promoted before V8 frees it and
// the worker's RSS climbs by ~100 MiB. Here the upload side allocates nothing per part, so memory
// stays at 2 × partSize whatever the size, and the stream is read while a part is in flight.
import type { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  type S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";

/** S3's smallest part (but the last), and its limit on parts: objects up to ~48 GiB at this size. */
export const MIN_PART_SIZE = 5 * 1024 * 1024;
export const MAX_PARTS = 10_000;

export async function uploadStream(
  client: S3Client,
  target: { bucket: string; key: string; contentType?: string },
  body: Readable,
  partSize = MIN_PART_SIZE,
): Promise<{ parts: number; bytes: number }> {
  const { bucket: Bucket, key: Key } = target;
  const created = await client.send(
    new CreateMultipartUploadCommand({
      Bucket,
      Key,
      ContentType: target.contentType ?? "application/octet-stream",
    }),
  );
  const UploadId = created.UploadId;
  if (!UploadId) throw new Error("the store started no multipart upload (no UploadId)");
  const buffers = [Buffer.allocUnsafe(partSize), Buffer.allocUnsafe(partSize)];
  const done: CompletedPart[] = [];
  let current = 0;
  let filled = 0;
  let partNumber = 0;
  let bytes = 0;
  let inFlight: Promise<void> | undefined;

  /** Sends the current buffer once the previous part is through, then switches buffers. */
  const flush = async () => {
    const part = buffers[current]?.subarray(0, filled) ?? Buffer.alloc(0);
    partNumber++;
    if (partNumber > MAX_PARTS)
      throw new Error(`the stream needs more than ${MAX_PARTS} parts of ${partSize} bytes`);
    const PartNumber = partNumber;
    await inFlight;
    inFlight = client
      .send(
        new UploadPartCommand({ Bucket, Key, UploadId, PartNumber, Body: part, ContentLength: part.length }),
      )
      .then((answer) => {
        done.push({ ETag: answer.ETag, PartNumber });
      });
    current = 1 - current;
    filled = 0;
  };

  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      let offset = 0;
      while (offset < chunk.length) {
        const target = buffers[current];
        if (!target) throw new Error("part buffer missing");
        const copied = chunk.copy(target, filled, offset);
        filled += copied;
        offset += copied;
        bytes += copied;
        if (filled === partSize) await flush();
      }
    }
    if (filled > 0 || partNumber === 0) await flush();
    await inFlight;
    done.sort((a, b) => (a.PartNumber ?? 0) - (b.PartNumber ?? 0));
    await client.send(
      new CompleteMultipartUploadCommand({ Bucket, Key, UploadId, MultipartUpload: { Parts: done } }),
    );
    return { parts: partNumber, bytes };
  } catch (error) {
    await inFlight?.catch(() => undefined);
    // Parts of an abandoned upload are billed until aborted.
    await client.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId })).catch(() => undefined);
    throw error;
  }
}

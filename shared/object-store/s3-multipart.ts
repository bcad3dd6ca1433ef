// A multipart upload of a stream into S3 from a fixed ring of part buffers allocated once and
// reused: a buffer is refilled from the stream once its part's upload is answered.
// @aws-sdk/lib-storage allocates (and copies into) a new buffer per part; over a multi-GiB snapshot
// that garbage is promoted before V8 frees it and the worker's RSS climbs by ~100 MiB. Here the
// upload side allocates nothing per part, so memory stays at `buffers × partSize` whatever the
// size. More than one part in flight matters: a store answers each part only once it has written
// it, and with a single part in flight the snapshot stream waits out every answer.
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

export interface UploadShape {
  /** Bytes per part (≥ MIN_PART_SIZE but for the last part). */
  partSize: number;
  /** Part buffers in the ring (≥ 2): up to this many parts in flight, the stream paused meanwhile. */
  buffers: number;
}

export async function uploadStream(
  client: S3Client,
  target: { bucket: string; key: string; contentType?: string },
  body: Readable,
  shape: UploadShape,
): Promise<{ parts: number; bytes: number }> {
  const { bucket: Bucket, key: Key } = target;
  const { partSize } = shape;
  if (shape.buffers < 2) throw new Error("an upload needs at least 2 part buffers");
  const created = await client.send(
    new CreateMultipartUploadCommand({
      Bucket,
      Key,
      ContentType: target.contentType ?? "application/octet-stream",
    }),
  );
  const UploadId = created.UploadId;
  if (!UploadId) throw new Error("the store started no multipart upload (no UploadId)");
  const buffers = Array.from({ length: shape.buffers }, () => Buffer.allocUnsafe(partSize));
  /** The upload of the part last sent from each buffer: the buffer is free once it settled. */
  const sending: (Promise<void> | undefined)[] = buffers.map(() => undefined);
  const done: CompletedPart[] = [];
  let current = 0;
  let filled = 0;
  let partNumber = 0;
  let bytes = 0;
  let failure: unknown;

  /** Sends the current buffer, then waits until the next buffer in the ring is free to fill. */
  const flush = async () => {
    const part = buffers[current]?.subarray(0, filled) ?? Buffer.alloc(0);
    partNumber++;
    if (partNumber > MAX_PARTS)
      throw new Error(`the stream needs more than ${MAX_PARTS} parts of ${partSize} bytes`);
    const PartNumber = partNumber;
    sending[current] = client
      .send(
        new UploadPartCommand({ Bucket, Key, UploadId, PartNumber, Body: part, ContentLength: part.length }),
      )
      .then(
        (answer) => {
          done.push({ ETag: answer.ETag, PartNumber });
        },
        (error: unknown) => {
          // Kept, not thrown here: the loop below rethrows it at its next flush or at the end.
          failure ??= error;
        },
      );
    current = (current + 1) % buffers.length;
    filled = 0;
    await sending[current];
    if (failure !== undefined) throw failure;
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
    await Promise.all(sending);
    if (failure !== undefined) throw failure;
    done.sort((a, b) => (a.PartNumber ?? 0) - (b.PartNumber ?? 0));
    await client.send(
      new CompleteMultipartUploadCommand({ Bucket, Key, UploadId, MultipartUpload: { Parts: done } }),
    );
    return { parts: partNumber, bytes };
  } catch (error) {
    await Promise.all(sending);
    // Parts of an abandoned upload are billed until aborted.
    await client.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId })).catch(() => undefined);
    throw error;
  }
}

// Receives a request body straight to a file, hashing it on the way: nothing holds a whole object
// in memory (etcd snapshots are GiBs), back-pressure comes from the file write. The MD5 gives the
// ETag and checks Content-MD5; a hex x-oss-content-sha256 (V4) is checked the same way. A body that
// fails a check, or a client that goes away mid-upload, leaves no file behind.
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { rm } from "node:fs/promises";
import type { Readable } from "node:stream";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { contentSha256Mismatch, entityTooLarge, incompleteBody, invalidDigest, OssError } from "./errors.ts";

/** OSS's limit for PutObject and for one part of a multipart upload. */
export const MAX_SINGLE_UPLOAD_BYTES = 5 * 1024 ** 3;

export interface BodyExpectations {
  maxBytes: number;
  /** Content-Length, when the client sent one (chunked uploads do not). */
  declaredLength: number | undefined;
  /** The Content-MD5 header: base64 of the body's MD5. */
  contentMd5: string | undefined;
  /** The x-oss-content-sha256 header (V4): a hex SHA-256, or UNSIGNED-PAYLOAD. */
  contentSha256: string | undefined;
}

export interface ReceivedBody {
  path: string;
  size: number;
  md5: Buffer;
}

/** The 16 bytes a Content-MD5 header stands for, or an InvalidDigest error when it is malformed. */
export function parseContentMd5(value: string): Buffer {
  const digest = Buffer.from(value.trim(), "base64");
  if (digest.length !== 16 || digest.toString("base64") !== value.trim()) throw invalidDigest(value);
  return digest;
}

export function contentLength(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  return /^\d+$/.test(value) ? Number(value) : undefined;
}

export async function receiveBody(
  body: Readable,
  path: string,
  expected: BodyExpectations,
): Promise<ReceivedBody> {
  const expectedMd5 = expected.contentMd5 === undefined ? undefined : parseContentMd5(expected.contentMd5);
  const expectedSha256 =
    expected.contentSha256 !== undefined && /^[0-9a-fA-F]{64}$/.test(expected.contentSha256)
      ? expected.contentSha256.toLowerCase()
      : undefined;
  if (expected.declaredLength !== undefined && expected.declaredLength > expected.maxBytes) {
    throw entityTooLarge(expected.maxBytes);
  }
  const md5 = createHash("md5");
  const sha256 = expectedSha256 === undefined ? undefined : createHash("sha256");
  let size = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      size += chunk.length;
      if (size > expected.maxBytes) {
        done(entityTooLarge(expected.maxBytes));
        return;
      }
      md5.update(chunk);
      sha256?.update(chunk);
      done(null, chunk);
    },
  });
  try {
    await pipeline(body, meter, createWriteStream(path, { flags: "wx" }));
    if (expected.declaredLength !== undefined && size !== expected.declaredLength) throw incompleteBody();
    const digest = md5.digest();
    if (expectedMd5 !== undefined && !digest.equals(expectedMd5)) {
      throw invalidDigest(expected.contentMd5 ?? "", digest.toString("base64"));
    }
    const sha256Hex = sha256?.digest("hex");
    if (expectedSha256 !== undefined && sha256Hex !== expectedSha256) {
      throw contentSha256Mismatch(expectedSha256, sha256Hex ?? "");
    }
    return { path, size, md5: digest };
  } catch (error) {
    await rm(path, { force: true });
    if (error instanceof OssError) throw error;
    // The client went away or the connection broke: there is no complete body to keep.
    throw Object.assign(incompleteBody(), { cause: error });
  }
}

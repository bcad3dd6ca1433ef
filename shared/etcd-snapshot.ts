// Reading a snapshot from a member with the maintenance Snapshot stream, and checking one.
//
// etcd sends the backend database followed by a 32-byte SHA-256 of it; `etcdutl snapshot restore`
// refuses a file whose trailer does not match. SnapshotDigest checks that same trailer while the
// bytes pass through, so a truncated or corrupted backup is caught on its way to the store (and
// before a restore deletes anything), and it also hashes the whole object for the checksum we
// store next to it.
import { createHash, type Hash } from "node:crypto";
import { Readable, Transform, type TransformCallback } from "node:stream";
import { crc32 } from "node:zlib";
import type { ISnapshotResponse } from "etcd3";
import { createEtcdClient, type EtcdClientOptions } from "./etcd-members.ts";

const TRAILER = 32;

/**
 * The HTTP/2 flow-control window of a snapshot's connection and stream. grpc-js's default (64 KiB)
 * lets etcd send 64 KiB per round trip: the stream ran at ~150 MB/s and held the backup back
 * (bench/backup.ts, 1.2 GiB: 12.4–15.6 s against etcdctl's 5–7 s; with 1 MiB 6.7–11.3 s). The
 * stream still waits for the upload (grpc-js reads the next message only when asked), so the window
 * is all a slow store leaves buffered. 16 MiB was no faster and grew the worker by 77 MiB.
 */
const SNAPSHOT_WINDOW = 1024 * 1024;

/** Which checks a SnapshotDigest makes; all by default. */
export interface DigestChecks {
  /** The SHA-256 of every byte (what a backup records, and a restore compares with). */
  wholeHash?: boolean;
  /** etcd's trailer: the last 32 bytes are the SHA-256 of the rest. */
  trailer?: boolean;
  /**
   * The CRC-32 of every byte, recorded beside the SHA-256 for the restore's seeds: zlib's (native)
   * runs at ~4.7 GB/s here against SHA-256's ~1.7, and each seed downloads the whole backup on
   * cores it may share with the others.
   */
  crc32?: boolean;
}

/** A CRC-32 as 8 hex digits, as the backup's metadata records it. */
function crc32Hex(value: number): string {
  return value.toString(16).padStart(8, "0");
}

export class SnapshotDigest extends Transform {
  // One SHA-256 pass (~0.8 s per GiB here) gives both checks: the pass covers every byte but the
  // last 32 (etcd's database), and the whole-object hash is that state continued with those 32
  // bytes. The bytes are never hashed twice, whichever checks are asked for.
  #database: Hash | undefined;
  #checks: Required<DigestChecks>;
  #tail: Buffer = Buffer.alloc(0);
  #crc32 = 0;
  bytes = 0;

  constructor(checks: DigestChecks = {}) {
    super();
    this.#checks = {
      wholeHash: checks.wholeHash !== false,
      trailer: checks.trailer !== false,
      crc32: checks.crc32 !== false,
    };
    // Asked for neither SHA-256 check (etcdutl checks the trailer itself), it hashes nothing with it.
    if (this.#checks.wholeHash || this.#checks.trailer) this.#database = createHash("sha256");
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.#checks.crc32) this.#crc32 = crc32(chunk, this.#crc32);
    const database = this.#database;
    if (!database) {
      done(null, chunk);
      return;
    }
    // Everything but the last 32 bytes seen so far belongs to the database. No copy of the chunk
    // (a snapshot is GiBs of them): only the ≤ 32-byte tail is carried over.
    if (chunk.length >= TRAILER) {
      if (this.#tail.length > 0) database.update(this.#tail);
      database.update(chunk.subarray(0, chunk.length - TRAILER));
      this.#tail = Buffer.from(chunk.subarray(chunk.length - TRAILER));
    } else {
      const joined = Buffer.concat([this.#tail, chunk]);
      const cut = Math.max(0, joined.length - TRAILER);
      if (cut > 0) database.update(joined.subarray(0, cut));
      this.#tail = Buffer.from(joined.subarray(cut));
    }
    done(null, chunk);
  }

  /**
   * After the stream ended: the hex SHA-256 and CRC-32 of every byte and whether etcd's trailer
   * matches, each undefined when that check was not asked for.
   */
  result(): {
    sha256: string | undefined;
    crc32: string | undefined;
    size: number;
    trailerValid: boolean | undefined;
  } {
    const database = this.#database;
    const trailerValid =
      database && this.#checks.trailer
        ? this.#tail.length === TRAILER && this.bytes > TRAILER && database.copy().digest().equals(this.#tail)
        : undefined;
    const sha256 =
      database && this.#checks.wholeHash ? database.copy().update(this.#tail).digest("hex") : undefined;
    const crc = this.#checks.crc32 ? crc32Hex(this.#crc32) : undefined;
    return { sha256, crc32: crc, size: this.bytes, trailerValid };
  }
}

export interface MemberSnapshot {
  /**
   * The store's revision when the snapshot began (from a Status call just before it): the snapshot
   * holds at least this revision. etcd 3.5/3.6 send no header in the Snapshot stream itself.
   */
  revision: number;
  /** The member's etcd version. */
  etcdVersion: string;
  /**
   * The number of bytes the stream will carry (database and trailer), from the first message's
   * remaining_bytes; undefined if the member did not say.
   */
  size: number | undefined;
  /** The snapshot's bytes. */
  stream: Readable;
  close(): void;
}

/** Resolves with the stream's first message (so the member answered), leaving the stream paused. */
function firstMessage(responses: Readable): Promise<ISnapshotResponse> {
  return new Promise<ISnapshotResponse>((resolve, reject) => {
    const onData = (message: ISnapshotResponse) => {
      cleanup();
      responses.pause();
      resolve(message);
    };
    const onError = (error: Error) => {
      cleanup();
      reject(error);
    };
    const onEnd = () => {
      cleanup();
      reject(new Error("the member closed the snapshot stream before sending anything"));
    };
    const cleanup = () => {
      responses.off("data", onData);
      responses.off("error", onError);
      responses.off("end", onEnd);
    };
    responses.on("data", onData);
    responses.on("error", onError);
    responses.on("end", onEnd);
  });
}

/**
 * Every etcd since 3.0 sends the database in messages that each say how many of its bytes are still
 * to come, then the 32-byte trailer (etcdserver/api/v3rpc/maintenance.go): the first message gives
 * the whole length.
 */
export function announcedSize(first: ISnapshotResponse): number | undefined {
  const remaining = Number(first.remaining_bytes);
  if (!Number.isSafeInteger(remaining) || remaining < 0) return undefined;
  return first.blob.length + remaining + TRAILER;
}

/**
 * Opens the Snapshot stream of one member. Resolves once the first message arrived (the member
 * answered); the bytes then flow with back-pressure: gRPC reads the next message only when the
 * consumer (the upload) asks for more, so memory stays flat whatever the snapshot's size.
 */
export async function openSnapshot(endpoint: string, options: EtcdClientOptions): Promise<MemberSnapshot> {
  const client = createEtcdClient(endpoint, options, { "grpc-node.flow_control_window": SNAPSHOT_WINDOW });
  try {
    const status = await client.maintenance.status();
    const responses = await client.maintenance.snapshot();
    if (!(responses instanceof Readable))
      throw new Error("the etcd client's snapshot stream is not a Readable");
    const first = await firstMessage(responses);
    const blobs = new Transform({
      writableObjectMode: true,
      transform(message: ISnapshotResponse, _encoding, done) {
        done(null, message.blob);
      },
    });
    blobs.push(first.blob);
    responses.pipe(blobs);
    responses.once("error", (error: Error) => blobs.destroy(error));
    return {
      revision: Number(status.header.revision),
      etcdVersion: status.version,
      size: announcedSize(first),
      stream: blobs,
      close: () => {
        responses.destroy();
        client.close();
      },
    };
  } catch (error) {
    client.close();
    throw new Error(
      `snapshot from ${endpoint} failed: ${error instanceof Error ? error.message : String(error)}`,
      {
        cause: error,
      },
    );
  }
}

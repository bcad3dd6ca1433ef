// The checks over an etcd snapshot's bytes, made while they pass: etcd's trailer (the last 32 bytes
// are the SHA-256 of the database before them), the SHA-256 of the whole object a backup records,
// and the CRC-32 a restore's seeds compare. Apart from shared/etcd-snapshot.ts so that a restore's
// fetch, which only checks a download, does not load the etcd client (~0.2 CPU-s per seed).
import { createHash, type Hash } from "node:crypto";
import { Transform, type TransformCallback } from "node:stream";
import { crc32 } from "node:zlib";

/** etcd's trailer: the SHA-256 of the database, after it. */
export const SNAPSHOT_TRAILER_BYTES = 32;
const TRAILER = SNAPSHOT_TRAILER_BYTES;

/** Which checks a SnapshotChecksums makes; all by default. */
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

/** The checks, fed the snapshot's bytes in order by whoever reads them (see SnapshotDigest). */
export class SnapshotChecksums {
  // One SHA-256 pass (~0.8 s per GiB here) gives both checks: the pass covers every byte but the
  // last 32 (etcd's database), and the whole-object hash is that state continued with those 32
  // bytes. The bytes are never hashed twice, whichever checks are asked for.
  #database: Hash | undefined;
  #checks: Required<DigestChecks>;
  #tail: Buffer = Buffer.alloc(0);
  #crc32 = 0;
  bytes = 0;

  constructor(checks: DigestChecks = {}) {
    this.#checks = {
      wholeHash: checks.wholeHash !== false,
      trailer: checks.trailer !== false,
      crc32: checks.crc32 !== false,
    };
    // Asked for neither SHA-256 check (etcdutl checks the trailer itself), it hashes nothing with it.
    if (this.#checks.wholeHash || this.#checks.trailer) this.#database = createHash("sha256");
  }

  /** Takes the next bytes of the snapshot into every check. */
  update(chunk: Buffer): void {
    this.bytes += chunk.length;
    if (this.#checks.crc32) this.#crc32 = crc32(chunk, this.#crc32);
    const database = this.#database;
    if (!database) return;
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
  }

  /**
   * After the last bytes: the hex SHA-256 and CRC-32 of every byte and whether etcd's trailer
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

/** The checks as a pipeline stage: the bytes pass through unchanged. */
export class SnapshotDigest extends Transform {
  readonly #checks: SnapshotChecksums;

  constructor(checks: DigestChecks = {}) {
    super();
    this.#checks = new SnapshotChecksums(checks);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.#checks.update(chunk);
    done(null, chunk);
  }

  /** After the stream ended: see SnapshotChecksums.result. */
  result(): ReturnType<SnapshotChecksums["result"]> {
    return this.#checks.result();
  }
}

// The body of etcd's Maintenance/Snapshot response (gRPC over HTTP/2), turned into the snapshot's
// bytes as they arrive.
//
// Why not grpc-js: it joins each message's HTTP/2 frames into a new buffer (Buffer.concat) and
// protobufjs then hands over the blob; for a 1.2 GiB snapshot that is 1.2 GiB copied and 38,000
// buffers to collect, and the worker spent ~2.9 CPU-s receiving (2.1 user, 0.8 system) against
// ~0.9 for node:http2 alone — on the two cores it shares with etcd and the store. This decoder hands
// on slices of the frames it is given: no byte of the blob is copied.
//
// Tried and dropped: gathering the blob into 64 or 256 KiB blocks (one copy). Beside etcd and the
// store on loopback the store's CPU fell by a third to a half (it writes what each socket read
// gives it, and etcd's 16 KiB frames come with ~20-byte tails), but the copies are new Buffers that
// live until V8's external-memory collection: the worker's RSS grew by 78–108 MiB during a 1 GiB
// backup (the goal is ≤ 64). Collecting the young generation every 4 MiB kept it at +14–17 MiB, yet
// in bench/backup.ts, with etcd in a pod, the backup took 6.3–6.8 s (worker 3.4–4.4 CPU-s) against
// 5.4–6.3 s (3.2–3.4) with slices, in sets run back to back. What the blocks were after, fewer and
// larger writes to the store, the upload now gets without a copy: its request is corked for each
// event-loop turn and the turn's slices leave in one writev (object-store/turn-batched-transform.ts).
//
// The wire format is small and fixed: each gRPC message is a 1-byte compressed flag, a 4-byte
// big-endian length and a protobuf SnapshotResponse (etcdserverpb, api/etcdserverpb/rpc.proto):
//   header = 1 (message), remaining_bytes = 2 (uint64), blob = 3 (bytes), version = 4 (string, 3.6+).
// Fields other than the blob are read byte by byte (a few dozen bytes per 32 KiB message); fields
// this code does not know are skipped by their wire type, as protobuf requires.
import { Transform, type TransformCallback } from "node:stream";

/** What the first message says about the whole snapshot. */
export interface SnapshotAnnouncement {
  /** The first message's blob length. */
  blobBytes: number;
  /** remaining_bytes: the blob bytes still to come after the first message. */
  remainingBytes: number;
}

export class SnapshotDecodeError extends Error {
  override name = "SnapshotDecodeError";
}

const BLOB_FIELD = 3;
const REMAINING_BYTES_FIELD = 2;

/** Where in the body the decoder is (a plain object: type stripping takes no enums). */
const Stage = {
  /** The 5-byte gRPC message prefix. */
  Prefix: 0,
  /** A field's key (varint: field number and wire type). */
  Key: 1,
  /** A varint field's value. */
  Varint: 2,
  /** A length-delimited field's length (varint). */
  Length: 3,
  /** The bytes of the blob field: passed on. */
  Blob: 4,
  /** The bytes of any other field: dropped. */
  Skip: 5,
} as const;
type Stage = (typeof Stage)[keyof typeof Stage];

/**
 * A Transform from the response body's chunks (as node:http2 delivers them) to the snapshot's bytes.
 * Calls `announce` once: at the first message's blob length (etcd writes remaining_bytes before the
 * blob, in field order), before any byte is passed on — a consumer may wait for it before it reads —
 * or at the end of a first message without a blob. Fails on a compressed message (none was asked
 * for), a malformed message, and a body that ends inside a message.
 */
export class SnapshotResponseDecoder extends Transform {
  readonly #announce: (announcement: SnapshotAnnouncement) => void;
  #stage: Stage = Stage.Prefix;
  /** The prefix's bytes, gathered across chunks. */
  #prefix = Buffer.alloc(5);
  #prefixFilled = 0;
  /** Bytes of the current message not yet read. */
  #messageLeft = 0;
  /** Bytes of the current blob or skipped field not yet read. */
  #fieldLeft = 0;
  /** The varint being read, and the bit it continues at. */
  #varint = 0;
  #shift = 0;
  #field = 0;
  #messages = 0;
  /** The first message's remaining_bytes (proto3 leaves out a zero). */
  #remainingBytes = 0;
  #announced = false;

  constructor(announce: (announcement: SnapshotAnnouncement) => void) {
    super();
    this.#announce = announce;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    try {
      this.#read(chunk);
      done();
    } catch (error) {
      done(error instanceof Error ? error : new SnapshotDecodeError(String(error)));
    }
  }

  override _flush(done: TransformCallback): void {
    if (this.#stage === Stage.Prefix && this.#prefixFilled === 0) done();
    else done(new SnapshotDecodeError(`the snapshot stream ended inside message ${this.#messages}`));
  }

  #read(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      switch (this.#stage) {
        case Stage.Prefix: {
          const take = Math.min(5 - this.#prefixFilled, chunk.length - at);
          chunk.copy(this.#prefix, this.#prefixFilled, at, at + take);
          this.#prefixFilled += take;
          at += take;
          if (this.#prefixFilled === 5) this.#startMessage();
          break;
        }
        case Stage.Blob:
        case Stage.Skip: {
          const take = Math.min(this.#fieldLeft, chunk.length - at);
          if (this.#stage === Stage.Blob) this.push(chunk.subarray(at, at + take));
          at += take;
          this.#fieldLeft -= take;
          this.#messageLeft -= take;
          if (this.#fieldLeft === 0) this.#nextField();
          break;
        }
        default: {
          const byte = chunk[at] ?? 0;
          at += 1;
          this.#messageLeft -= 1;
          this.#varintByte(byte);
        }
      }
    }
  }

  #startMessage(): void {
    this.#prefixFilled = 0;
    if (this.#prefix[0] !== 0)
      throw new SnapshotDecodeError(`message ${this.#messages + 1} is compressed (flag ${this.#prefix[0]})`);
    this.#messages += 1;
    this.#messageLeft = this.#prefix.readUInt32BE(1);
    this.#nextField();
  }

  /** After a field: the next key, or the next message once this one is used up. */
  #nextField(): void {
    if (this.#messageLeft === 0) {
      if (this.#messages === 1) this.#announceOnce(0);
      this.#stage = Stage.Prefix;
      return;
    }
    this.#stage = Stage.Key;
    this.#varint = 0;
    this.#shift = 0;
  }

  #varintByte(byte: number): void {
    if (this.#shift > 63) throw new SnapshotDecodeError(`a varint in message ${this.#messages} is too long`);
    // Multiplication, not <<: remaining_bytes may pass 2^31.
    this.#varint += (byte & 0x7f) * 2 ** this.#shift;
    this.#shift += 7;
    if (byte & 0x80) {
      if (this.#messageLeft <= 0)
        throw new SnapshotDecodeError(`a varint runs past the end of message ${this.#messages}`);
      return;
    }
    const value = this.#varint;
    this.#varint = 0;
    this.#shift = 0;
    switch (this.#stage) {
      case Stage.Key:
        this.#key(value);
        break;
      case Stage.Varint:
        if (this.#field === REMAINING_BYTES_FIELD && this.#messages === 1) this.#remainingBytes = value;
        this.#nextField();
        break;
      case Stage.Length:
        if (value > this.#messageLeft) throw this.#pastTheEnd();
        this.#fieldLeft = value;
        if (this.#field === BLOB_FIELD && this.#messages === 1) this.#announceOnce(value);
        this.#stage = this.#field === BLOB_FIELD ? Stage.Blob : Stage.Skip;
        if (value === 0) this.#nextField();
        break;
    }
  }

  #key(key: number): void {
    this.#field = Math.floor(key / 8);
    const wireType = key % 8;
    if (this.#messageLeft === 0)
      throw new SnapshotDecodeError(`field ${this.#field} of message ${this.#messages} has no value`);
    switch (wireType) {
      case 0:
        this.#stage = Stage.Varint;
        return;
      case 1: // fixed64
      case 5: // fixed32
        this.#fieldLeft = wireType === 1 ? 8 : 4;
        if (this.#fieldLeft > this.#messageLeft) throw this.#pastTheEnd();
        this.#stage = Stage.Skip;
        return;
      case 2:
        this.#stage = Stage.Length;
        return;
      default:
        throw new SnapshotDecodeError(
          `message ${this.#messages} has field ${this.#field} of wire type ${wireType}`,
        );
    }
  }

  #pastTheEnd(): SnapshotDecodeError {
    return new SnapshotDecodeError(
      `field ${this.#field} of message ${this.#messages} runs past the message's end`,
    );
  }

  #announceOnce(blobBytes: number): void {
    if (this.#announced) return;
    this.#announced = true;
    this.#announce({ blobBytes, remainingBytes: this.#remainingBytes });
  }
}

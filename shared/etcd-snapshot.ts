// Reading a snapshot from a member with the maintenance Snapshot stream.
//
// etcd sends the backend database followed by a 32-byte SHA-256 of it; `etcdutl snapshot restore`
// refuses a file whose trailer does not match. SnapshotDigest (shared/snapshot-digest.ts) checks
// that same trailer while the bytes pass through, so a truncated or corrupted backup is caught on
// its way to the store (and before a restore deletes anything), and it also hashes the whole object
// for the checksum we store next to it.
import { Readable, Transform } from "node:stream";
import type { ISnapshotResponse } from "etcd3";
import { createEtcdClient, type EtcdClientOptions } from "./etcd-members.ts";
import { SNAPSHOT_TRAILER_BYTES } from "./snapshot-digest.ts";

/**
 * The HTTP/2 flow-control window of a snapshot's connection and stream. grpc-js's default (64 KiB)
 * lets etcd send 64 KiB per round trip: the stream ran at ~150 MB/s and held the backup back
 * (bench/backup.ts, 1.2 GiB: 12.4–15.6 s against etcdctl's 5–7 s; with 1 MiB 6.7–11.3 s). The
 * stream still waits for the upload (grpc-js reads the next message only when asked), so the window
 * is all a slow store leaves buffered. 16 MiB was no faster and grew the worker by 77 MiB.
 */
const SNAPSHOT_WINDOW = 1024 * 1024;

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
  return first.blob.length + remaining + SNAPSHOT_TRAILER_BYTES;
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

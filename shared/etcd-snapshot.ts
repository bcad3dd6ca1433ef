// Reading a snapshot from a member with the maintenance Snapshot stream.
//
// etcd sends the backend database followed by a 32-byte SHA-256 of it; `etcdutl snapshot restore`
// refuses a file whose trailer does not match. SnapshotDigest (shared/snapshot-digest.ts) checks
// that same trailer while the bytes pass through, so a truncated or corrupted backup is caught on
// its way to the store (and before a restore deletes anything), and it also hashes the whole object
// for the checksum we store next to it.
//
// The Status call goes through the etcd client; the stream itself is read with node:http2 and
// SnapshotResponseDecoder, which hands on the frames' bytes without copying them (why: see there).
import { type ClientHttp2Session, type ClientHttp2Stream, connect, constants } from "node:http2";
import type { Readable } from "node:stream";
import { createEtcdClient, type EtcdClientOptions, type EtcdTLS } from "./etcd-members.ts";
import {
  type SnapshotAnnouncement,
  SnapshotDecodeError,
  SnapshotResponseDecoder,
} from "./etcd-snapshot-decoder.ts";
import { SNAPSHOT_TRAILER_BYTES } from "./snapshot-digest.ts";

/**
 * The HTTP/2 flow-control window of a snapshot's connection and stream. 64 KiB (grpc-js's default)
 * lets etcd send 64 KiB per round trip: the stream ran at ~150 MB/s and held the backup back
 * (bench/backup.ts, 1.2 GiB: 12.4–15.6 s against etcdctl's 5–7 s; with 1 MiB 6.7–11.3 s). The
 * stream still waits for the upload (the decoder takes the next frame only when its reader asks),
 * so the window is all a slow store leaves buffered. 16 MiB was no faster.
 */
const SNAPSHOT_WINDOW = 1024 * 1024;

/** How long the member has at least to connect and send the first message. */
const FIRST_MESSAGE_TIMEOUT_MS = 10_000;

/** A gRPC request carrying an empty SnapshotRequest: no compression flag, length 0. */
const EMPTY_REQUEST = Buffer.alloc(5);

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

/**
 * Every etcd since 3.0 sends the database in messages that each say how many of its bytes are still
 * to come, then the 32-byte trailer (etcdserver/api/v3rpc/maintenance.go): the first message gives
 * the whole length.
 */
export function announcedSize(announcement: SnapshotAnnouncement): number | undefined {
  const { blobBytes, remainingBytes } = announcement;
  if (!Number.isSafeInteger(remainingBytes) || remainingBytes < 0) return undefined;
  return blobBytes + remainingBytes + SNAPSHOT_TRAILER_BYTES;
}

/** The member's authority as node:http2 dials it: with TLS options, always https. */
function snapshotAuthority(endpoint: string, tls: EtcdTLS | undefined): string {
  const url = new URL(endpoint.includes("://") ? endpoint : `http://${endpoint}`);
  return `${tls ? "https" : "http"}://${url.host}`;
}

/** The TLS options were checked by createEtcdClient, which made the Status call before. */
function dial(endpoint: string, tls: EtcdTLS | undefined): ClientHttp2Session {
  return connect(snapshotAuthority(endpoint, tls), {
    settings: { initialWindowSize: SNAPSHOT_WINDOW },
    ...(tls ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.serverName } : {}),
  });
}

/** A gRPC status other than OK, as an Error with etcd's own message. */
function grpcStatusError(headers: Record<string, unknown>): Error | undefined {
  const status = headers["grpc-status"];
  if (status === undefined || status === "0") return undefined;
  const message = headers["grpc-message"];
  const text = typeof message === "string" ? decodeURIComponent(message) : "no message";
  return new Error(`etcd answered gRPC status ${String(status)}: ${text}`);
}

/**
 * Feeds the response body into the decoder, and ends it only once the gRPC status says the
 * snapshot was sent whole: a member that fails half way (or a reset stream) fails the decoder.
 */
function wire(request: ClientHttp2Stream, decoder: SnapshotResponseDecoder): void {
  let failure: Error | undefined;
  let ended = false;
  request.on("response", (headers) => {
    const status = headers[":status"];
    if (status !== 200) failure = new Error(`etcd answered HTTP ${String(status)} to the Snapshot call`);
    // A call that fails at once answers with its status in the headers (trailers-only).
    failure ??= grpcStatusError(headers);
  });
  request.on("trailers", (trailers) => {
    failure ??= grpcStatusError(trailers);
    if (trailers["grpc-status"] === undefined) failure ??= new Error("etcd's answer carried no gRPC status");
  });
  request.pipe(decoder, { end: false });
  request.on("end", () => {
    ended = true;
    if (failure) decoder.destroy(failure);
    else decoder.end();
  });
  request.on("error", (error: Error) => decoder.destroy(error));
  request.on("close", () => {
    if (!ended && !decoder.destroyed)
      decoder.destroy(
        new SnapshotDecodeError(`the snapshot stream was reset (HTTP/2 code ${request.rstCode})`),
      );
  });
  decoder.on("close", () => request.close(constants.NGHTTP2_CANCEL));
}

/**
 * Opens the Snapshot stream of one member. Resolves once the first message arrived (the member
 * answered); the bytes then flow with back-pressure: the decoder takes the next frame only when the
 * consumer (the upload) asks for more, and HTTP/2 flow control holds etcd back, so memory stays
 * flat whatever the snapshot's size.
 */
export async function openSnapshot(endpoint: string, options: EtcdClientOptions): Promise<MemberSnapshot> {
  let session: ClientHttp2Session | undefined;
  const client = createEtcdClient(endpoint, options);
  try {
    const status = await client.maintenance.status();
    client.close();
    const opened = dial(endpoint, options.tls);
    session = opened;
    const sessionFailed = new Promise<never>((_, reject) => opened.once("error", reject));
    // Past the first message a failing connection fails the stream (wire); this keeps a late
    // session error from being unhandled.
    sessionFailed.catch(() => undefined);
    opened.once("connect", () => opened.setLocalWindowSize(SNAPSHOT_WINDOW));
    let announced: (announcement: SnapshotAnnouncement) => void = () => undefined;
    const first = new Promise<SnapshotAnnouncement>((resolve) => {
      announced = resolve;
    });
    const decoder = new SnapshotResponseDecoder((announcement) => announced(announcement));
    const request = opened.request({
      [constants.HTTP2_HEADER_METHOD]: "POST",
      [constants.HTTP2_HEADER_PATH]: "/etcdserverpb.Maintenance/Snapshot",
      [constants.HTTP2_HEADER_CONTENT_TYPE]: "application/grpc",
      [constants.HTTP2_HEADER_TE]: "trailers",
    });
    request.end(EMPTY_REQUEST);
    wire(request, decoder);
    const decoderFailed = new Promise<never>((_, reject) => {
      decoder.once("error", reject);
      // The writable side: it finishes once the body ended well, whether or not anyone read it.
      decoder.once("finish", () =>
        reject(new Error("the member closed the snapshot stream before sending anything")),
      );
    });
    decoderFailed.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const waitMs = Math.max(options.timeoutMs ?? 0, FIRST_MESSAGE_TIMEOUT_MS);
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no snapshot data within ${waitMs / 1000} s`)), waitMs);
    });
    const announcement = await Promise.race([first, sessionFailed, decoderFailed, timedOut]).finally(() =>
      clearTimeout(timer),
    );
    return {
      revision: Number(status.header.revision),
      etcdVersion: status.version,
      size: announcedSize(announcement),
      stream: decoder,
      close: () => {
        decoder.destroy();
        opened.close();
      },
    };
  } catch (error) {
    client.close();
    session?.destroy();
    throw new Error(
      `snapshot from ${endpoint} failed: ${error instanceof Error ? error.message : String(error)}`,
      {
        cause: error,
      },
    );
  }
}

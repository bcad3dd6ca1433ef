// The decoder of etcd's Snapshot response body, against messages encoded by protobufjs from the
// etcd client's own rpc.proto (an encoder independent of the decoder), split at every boundary.
// Against real members it runs in every backup and restore test (backup-restore, backup-tls, …).
import { randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import protobuf from "protobufjs";
import t from "tap";
import {
  type SnapshotAnnouncement,
  SnapshotDecodeError,
  SnapshotResponseDecoder,
} from "../shared/etcd-snapshot-decoder.ts";

const rpcProto = join(
  dirname(createRequire(import.meta.url).resolve("etcd3/package.json")),
  "proto/rpc.proto",
);
const root = protobuf.loadSync(rpcProto);
const SnapshotResponse = root.lookupType("etcdserverpb.SnapshotResponse");

/** One gRPC message: flag, big-endian length, body. */
function frame(body: Uint8Array, flag = 0): Buffer {
  const prefix = Buffer.alloc(5);
  prefix[0] = flag;
  prefix.writeUInt32BE(body.length, 1);
  return Buffer.concat([prefix, body]);
}

function message(fields: Record<string, unknown>): Buffer {
  return frame(SnapshotResponse.encode(SnapshotResponse.fromObject(fields)).finish());
}

/** A body as etcd sends it: the database in `chunk`-byte messages, then its 32-byte trailer. */
function etcdBody(database: Buffer, chunk: number, extra: Record<string, unknown> = {}): Buffer {
  const messages: Buffer[] = [];
  for (let sent = 0; sent < database.length; sent += chunk) {
    const blob = database.subarray(sent, sent + chunk);
    messages.push(message({ remainingBytes: database.length - sent - blob.length, blob, ...extra }));
  }
  messages.push(message({ remainingBytes: 0, blob: randomBytes(32), ...extra }));
  return Buffer.concat(messages);
}

async function decode(
  body: Buffer,
  pieces: number,
): Promise<{ out: Buffer; announcements: SnapshotAnnouncement[] }> {
  const announcements: SnapshotAnnouncement[] = [];
  const decoder = new SnapshotResponseDecoder((a) => announcements.push(a));
  const chunks: Buffer[] = [];
  for (let at = 0; at < body.length; at += pieces) chunks.push(body.subarray(at, at + pieces));
  const out = await buffer(Readable.from(chunks).pipe(decoder));
  return { out, announcements };
}

t.test("the blobs come out whole and in order, however the body is cut", async (t) => {
  const database = randomBytes(1000);
  const body = etcdBody(database, 300);
  const trailer = body.subarray(body.length - 32);
  for (const pieces of [1, 2, 3, 5, 7, 16, 64, 301, 306, body.length]) {
    const { out, announcements } = await decode(body, pieces);
    t.same(out, Buffer.concat([database, trailer]), `cut every ${pieces} bytes`);
    t.same(announcements, [{ blobBytes: 300, remainingBytes: 700 }], `announced once (${pieces})`);
  }
});

t.test("fields it does not use are skipped: a header, etcd 3.6's version, unknown ones", async (t) => {
  const database = randomBytes(500);
  const extra = {
    header: { clusterId: 7, memberId: 9, revision: 1234, raftTerm: 3 },
    version: "3.6.0",
  };
  const known = etcdBody(database, 200, extra);
  const { out, announcements } = await decode(known, 3);
  t.same(out.subarray(0, 500), database);
  t.same(announcements, [{ blobBytes: 200, remainingBytes: 300 }]);
  // Field 15 as fixed64 and field 16 as fixed32, which a newer etcd could add.
  const unknown = Buffer.from([
    0x79, 1, 2, 3, 4, 5, 6, 7, 8, 0x85, 0x01, 1, 2, 3, 4, 0x10, 0x05, 0x1a, 0x02, 0xaa, 0xbb,
  ]);
  const { out: tail } = await decode(frame(unknown), 1);
  t.same(tail, Buffer.from([0xaa, 0xbb]), "the blob after unknown fixed-width fields");
});

t.test("a first message without a blob still announces, after it", async (t) => {
  const { out, announcements } = await decode(
    Buffer.concat([message({ remainingBytes: 10 }), message({ blob: Buffer.from("0123456789") })]),
    4,
  );
  t.same(announcements, [{ blobBytes: 0, remainingBytes: 10 }]);
  t.equal(out.toString(), "0123456789");
});

t.test("an empty body ends with no bytes and no announcement", async (t) => {
  const { out, announcements } = await decode(Buffer.alloc(0), 1);
  t.equal(out.length, 0);
  t.same(announcements, []);
});

t.test("malformed bodies fail with what is wrong", async (t) => {
  const good = etcdBody(randomBytes(100), 64);
  const cases: [string, Buffer, RegExp][] = [
    ["a body cut inside a message", good.subarray(0, good.length - 3), /ended inside message/],
    ["a body cut inside a prefix", Buffer.concat([good, Buffer.from([0, 0])]), /ended inside message/],
    ["a compressed message", frame(Buffer.from([0x1a, 0x01, 0x41]), 1), /compressed/],
    ["a blob longer than its message", frame(Buffer.from([0x1a, 0x05, 0x41])), /runs past the message's end/],
    ["a fixed64 past the message", frame(Buffer.from([0x79, 1, 2])), /runs past the message's end/],
    ["a key without a value", frame(Buffer.from([0x10])), /has no value/],
    ["a varint past the message", frame(Buffer.from([0x10, 0x80])), /varint runs past/],
    ["a deprecated group wire type", frame(Buffer.from([0x1b, 0, 0])), /wire type 3/],
  ];
  for (const [what, body, error] of cases) {
    await t.rejects(decode(body, 2), { name: SnapshotDecodeError.name, message: error }, what);
  }
});

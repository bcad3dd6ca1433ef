// TurnBatchedTransform: the chunks one event-loop turn passes reach the destination in one writev,
// in order and whole; a destroyed stream leaves its destination uncorked. Through a real HTTP
// request to a local server as well (what putStream pipes it into); against the S3 store it runs
// in every PutObject of s3-put, object-store and the backup tests.
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { setTimeout as sleep } from "node:timers/promises";
import t from "tap";
import { TurnBatchedTransform } from "../shared/object-store/turn-batched-transform.ts";

/** A Writable that records how its chunks arrived: alone (_write) or together (_writev). */
function recorder(highWaterMark = 64 * 1024 * 1024) {
  const calls: { kind: "write" | "writev"; chunks: number }[] = [];
  const received: Buffer[] = [];
  const sink = new Writable({
    highWaterMark,
    write(chunk: Buffer, _encoding, done) {
      calls.push({ kind: "write", chunks: 1 });
      received.push(chunk);
      done();
    },
    writev(chunks, done) {
      calls.push({ kind: "writev", chunks: chunks.length });
      for (const { chunk } of chunks) received.push(chunk as Buffer);
      done();
    },
  });
  return { sink, calls, received };
}

/** The transform as putStream uses it, minus the counting: every chunk passes unchanged. */
const passThrough = () =>
  new TurnBatchedTransform({ transform: (chunk, _encoding, done) => done(null, chunk) });

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

t.test("the chunks of one turn arrive in one writev, each turn its own", async (t) => {
  const batched = passThrough();
  const { sink, calls, received } = recorder();
  const done = pipeline(batched, sink);
  const sent: Buffer[] = [];
  for (let turn = 0; turn < 3; turn++) {
    for (let i = 0; i < 32; i++) {
      const chunk = randomBytes(16 * 1024);
      sent.push(chunk);
      batched.write(chunk);
    }
    await nextTurn();
  }
  batched.end();
  await done;
  t.same(calls, [
    { kind: "writev", chunks: 32 },
    { kind: "writev", chunks: 32 },
    { kind: "writev", chunks: 32 },
  ]);
  t.equal(batched.batches, 3);
  t.ok(Buffer.concat(received).equals(Buffer.concat(sent)), "every byte, in order");
});

t.test("back-pressure: a destination that is full pauses the pipe, and nothing is lost", async (t) => {
  const batched = passThrough();
  // The destination reports full after 64 KiB: a turn's batch stops there and the rest waits.
  const { sink, calls, received } = recorder(64 * 1024);
  const done = pipeline(batched, sink);
  const sent = Array.from({ length: 64 }, () => randomBytes(16 * 1024));
  for (const chunk of sent) batched.write(chunk);
  batched.end();
  await done;
  t.ok(Buffer.concat(received).equals(Buffer.concat(sent)), "every byte, in order");
  t.ok(
    calls.every((call) => call.chunks <= 5),
    "no batch holds much more than the destination's high-water mark",
  );
  t.ok(calls.length > 1 && calls.length < sent.length, `batched, but in ${calls.length} writes`);
});

t.test("destroyed while corked, it uncorks its destination", async (t) => {
  const batched = passThrough();
  const { sink } = recorder();
  batched.pipe(sink);
  batched.write(Buffer.from("held"));
  t.equal(sink.writableCorked, 1, "corked for the turn");
  batched.destroy();
  t.equal(sink.writableCorked, 0, "uncorked by destroy");
  await nextTurn();
  t.equal(sink.writableCorked, 0, "and the turn's own uncork does not run again");
});

t.test("into a real HTTP request: the server gets every byte, in a quarter of the writes", async (t) => {
  const server = createServer(async (req, res) => {
    const hash = createHash("sha256");
    for await (const chunk of req) hash.update(chunk as Buffer);
    res.end(hash.digest("hex"));
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.teardown(() => server.close());
  const { port } = server.address() as AddressInfo;

  const chunks = Array.from({ length: 2048 }, () => randomBytes(16 * 1024));
  const expected = createHash("sha256");
  for (const chunk of chunks) expected.update(chunk);
  const batched = passThrough();
  const req = request({ host: "127.0.0.1", port, method: "PUT", path: "/" });
  // Counts the socket's writes (each one system call at least) by wrapping its two write methods.
  let socketWrites = 0;
  req.on("socket", (socket) => {
    const write = socket._write.bind(socket);
    const writev = socket._writev?.bind(socket);
    socket._write = (...args: Parameters<typeof write>) => {
      socketWrites++;
      write(...args);
    };
    if (writev)
      socket._writev = (...args: Parameters<typeof writev>) => {
        socketWrites++;
        writev(...args);
      };
  });
  batched.pipe(req);
  const answer = once(req, "response");
  // Eight chunks a turn, each in its own tick, as the callbacks of one poll's socket reads deliver
  // HTTP/2 frames (http.ClientRequest batches the writes of one tick by itself). A millisecond
  // between turns lets the server catch up, so that unbatched writes would each reach the kernel at
  // once (a slow reader batches them anyway, through back-pressure).
  const turn = (batch: Buffer[]) =>
    new Promise<void>((resolve) => {
      const next = (index: number) => {
        const chunk = batch[index];
        if (chunk === undefined) return resolve();
        batched.write(chunk);
        process.nextTick(next, index + 1);
      };
      next(0);
    });
  for (let i = 0; i < chunks.length; i += 8) {
    await turn(chunks.slice(i, i + 8));
    await sleep(1);
  }
  batched.end();
  const [response] = (await answer) as [AsyncIterable<Buffer>];
  let body = "";
  for await (const chunk of response) body += chunk.toString();
  t.equal(body, expected.digest("hex"), "the server hashed the same 32 MiB");
  // A batch ends at the socket's high-water mark (64 KiB): four of these chunks.
  t.ok(socketWrites <= chunks.length / 3, `${socketWrites} socket writes for ${chunks.length} chunks`);
});

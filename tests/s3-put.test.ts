// A backup of known size goes to S3 as one streamed PutObject (shared/object-store/s3-put.ts),
// against the real local store (versitygw): the bytes arrive exact, the request carries no payload
// hash, nothing is buffered whole, and every way the body can go wrong (it breaks off, it is
// shorter or longer than announced, the store refuses the request) fails the upload with that
// reason, leaves no object behind and ends the body's producer instead of hanging it.
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { Agent as HttpAgent } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import {
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
  S3ServiceException,
} from "@aws-sdk/client-s3";
import t, { type Test } from "tap";
import { ensureAssets } from "../infra/local/assets.ts";
import { startObjectStore } from "../infra/local/object-store.ts";
import { CommitRefusedError } from "../shared/commit-gate.ts";
import { announcedSize } from "../shared/etcd-snapshot.ts";
import { createS3Client, openS3Store, type S3StoreOptions } from "../shared/object-store/s3.ts";
import { MAX_PUT_SIZE, putStream, StreamLengthError } from "../shared/object-store/s3-put.ts";
import { ObjectStoreError } from "../shared/object-store/types.ts";
import { type SentRequest, watchRequests } from "./helpers/s3-requests.ts";

const MiB = 1024 * 1024;
await ensureAssets({ only: ["versitygw"], log: (line) => t.comment(line) });
const dir = await mkdtemp(join(tmpdir(), "eop-s3-put-"));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const server = await startObjectStore({ dir, host: "127.0.0.1" });
t.teardown(() => server.stop());
await server.createBucket("backups");
const storeOptions: S3StoreOptions = {
  bucket: "backups",
  endpoint: server.endpoint,
  forcePathStyle: true,
  credentials: {
    accessKeyId: server.accessKeyId,
    secretAccessKey: server.secretAccessKey,
    region: server.region,
  },
};
/** A client as the backup builds it. */
const s3 = createS3Client(storeOptions);
t.teardown(() => s3.destroy());

/** A client as the backup builds it, and what each of its requests carried once signed. */
function watchedClient(t: Test): { client: S3Client; sent: SentRequest[] } {
  const client = createS3Client(storeOptions);
  t.teardown(() => client.destroy());
  return { client, sent: watchRequests(client) };
}

const sha256 = (data: Buffer) => createHash("sha256").update(data).digest("hex");

/** data in 1 MiB chunks, as a snapshot stream arrives; `breakAfter` chunks then an error. */
function chunks(data: Buffer, breakAfter?: number): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (breakAfter !== undefined && sent === breakAfter * MiB) {
        this.destroy(new Error("the member went away mid-snapshot"));
        return;
      }
      if (sent >= data.length) {
        this.push(null);
        return;
      }
      this.push(data.subarray(sent, sent + MiB));
      sent += MiB;
    },
  });
}

async function storedHash(key: string): Promise<string> {
  const got = await s3.send(new GetObjectCommand({ Bucket: "backups", Key: key }));
  if (!(got.Body instanceof Readable)) throw new Error("GetObject's body is not a Node stream");
  const hash = createHash("sha256");
  for await (const chunk of got.Body) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

async function exists(key: string): Promise<boolean> {
  try {
    await s3.send(new HeadObjectCommand({ Bucket: "backups", Key: key }));
    return true;
  } catch (error) {
    if (error instanceof S3ServiceException && error.$metadata.httpStatusCode === 404) return false;
    throw error;
  }
}

/** What a promise rejected with (the test fails if it resolved). */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection");
}

t.test("a stream of announced size is one PutObject with an unsigned payload, bytes exact", async (t) => {
  const { client, sent } = watchedClient(t);
  const data = randomBytes(12 * MiB + 32);
  const result = await putStream(
    client,
    { bucket: "backups", key: "put/whole.backup" },
    chunks(data),
    data.length,
  );
  t.same(result, { bytes: data.length });
  t.same(
    sent.map((s) => s.command),
    ["PutObjectCommand"],
    "one request",
  );
  t.equal(sent[0]?.payloadHash, "UNSIGNED-PAYLOAD", "a streamed body is not hashed for the signature");
  t.equal(sent[0]?.length, String(data.length), "the request says its length up front");
  const head = await s3.send(new HeadObjectCommand({ Bucket: "backups", Key: "put/whole.backup" }));
  t.equal(head.ContentLength, data.length);
  t.equal(await storedHash("put/whole.backup"), sha256(data), "the store has the same bytes");
});

t.test(
  "a large put leaves through the store's agent, on a socket with a 1 MiB high-water mark",
  async (t) => {
    // Over 2 MiB the SDK asks for `100-continue`; given agent options rather than Agents it sent such
    // a request through a fresh agent of its own at Node's 64 KiB (s3.ts, STORE_AGENT_OPTIONS).
    const { client } = watchedClient(t);
    const data = randomBytes(8 * MiB);
    await putStream(client, { bucket: "backups", key: "put/agent.backup" }, chunks(data), data.length);
    const handler: unknown = client.config.requestHandler;
    if (!(typeof handler === "object" && handler !== null && "httpHandlerConfigs" in handler))
      throw new Error("the client's request handler is not the SDK's Node handler");
    const configs: unknown = (handler.httpHandlerConfigs as () => unknown).call(handler);
    const agent =
      typeof configs === "object" && configs !== null && "httpAgent" in configs
        ? configs.httpAgent
        : undefined;
    if (!(agent instanceof HttpAgent)) throw new Error("the handler has no http.Agent");
    const sockets = Object.values(agent.freeSockets).flat();
    t.equal(sockets.length, 1, "the put's socket went back to the store's agent (kept alive)");
    t.equal(sockets[0]?.writableHighWaterMark, MiB, "its writes are batched up to 1 MiB");
    t.equal(await storedHash("put/agent.backup"), sha256(data), "the store has the same bytes");
  },
);

t.test("openS3Store: one PutObject for a new key of known size, else multipart", async (t) => {
  const { client, sent } = watchedClient(t);
  const store = openS3Store(storeOptions, client);
  const data = randomBytes(11 * MiB);
  await store.upload("route/sized.backup", chunks(data), data.length);
  t.same(
    sent.splice(0).map((s) => s.command),
    ["HeadObjectCommand", "PutObjectCommand"],
    "sized, to a new key: one request",
  );
  await store.upload("route/sized.backup", chunks(data), data.length);
  t.same(
    sent.splice(0).map((s) => s.command),
    [
      "HeadObjectCommand",
      "CreateMultipartUploadCommand",
      "UploadPartCommand",
      "UploadPartCommand",
      "UploadPartCommand",
      "CompleteMultipartUploadCommand",
    ],
    "sized, over an object: multipart, which replaces it only once complete",
  );
  await store.upload("route/unsized.backup", chunks(data));
  t.same(
    sent.splice(0).map((s) => s.command),
    [
      "CreateMultipartUploadCommand",
      "UploadPartCommand",
      "UploadPartCommand",
      "UploadPartCommand",
      "CompleteMultipartUploadCommand",
    ],
    "unsized: three 5 MiB parts",
  );
  t.equal(await storedHash("route/sized.backup"), sha256(data));
  t.equal(await storedHash("route/unsized.backup"), sha256(data));
  // A size S3 cannot take in one request goes multipart: checked before any byte is read.
  t.rejects(
    putStream(s3, { bucket: "backups", key: "route/huge" }, chunks(data), MAX_PUT_SIZE + 1),
    RangeError,
  );
});

t.test("a body shorter or longer than announced fails the put", async (t) => {
  const data = randomBytes(3 * MiB);
  const short = await rejection(
    putStream(s3, { bucket: "backups", key: "length/short" }, chunks(data), data.length + 1),
  );
  t.type(short, StreamLengthError);
  t.match(String(short), /ended after 3145728 of the 3145729 bytes/);
  const long = await rejection(
    putStream(s3, { bucket: "backups", key: "length/long" }, chunks(data), data.length - 1),
  );
  t.type(long, StreamLengthError);
  t.match(String(long), /ran past the 3145727 bytes/);
});

t.test("a body that breaks off fails the put with its own error", async (t) => {
  const data = randomBytes(8 * MiB);
  const error = await rejection(
    putStream(s3, { bucket: "backups", key: "broken/put" }, chunks(data, 3), data.length),
  );
  t.match(String(error), /the member went away mid-snapshot/);
});

t.test("a failed upload leaves no object at a new key, and an old object whole", async (t) => {
  // versitygw keeps what arrived of a put that broke off (an unsigned payload has no hash to
  // check): seen here, so that the store's upload is held to what it promises.
  const data = randomBytes(8 * MiB);
  const store = openS3Store(storeOptions);
  t.teardown(() => store.close());
  const failed = await rejection(store.upload("broken/new.backup", chunks(data, 3), data.length));
  t.match(
    String(failed),
    /upload to s3:\/\/backups\/broken\/new.backup: .*the member went away mid-snapshot/,
  );
  t.equal(await exists("broken/new.backup"), false, "nothing at the new key");

  const good = randomBytes(2 * MiB);
  await store.upload("broken/old.backup", chunks(good), good.length);
  await rejection(store.upload("broken/old.backup", chunks(data, 6), data.length));
  t.equal(await storedHash("broken/old.backup"), sha256(good), "the previous backup is untouched");
});

t.test(
  "another writer's object at the key, put while an upload streamed, is never replaced nor deleted",
  async (t) => {
    const store = openS3Store(storeOptions);
    t.teardown(() => store.close());
    const theirs = randomBytes(2 * MiB);
    const putTheirs = (key: string) =>
      s3.send(
        new PutObjectCommand({ Bucket: "backups", Key: key, Body: theirs, ContentLength: theirs.length }),
      );
    const ours = randomBytes(4 * MiB);
    /** `ours`, with `meanwhile` run before its last MiB; then that MiB, or `refuse`'s error. */
    const body = (meanwhile: () => Promise<unknown>, refuse?: Error) => {
      let sent = 0;
      return new Readable({
        read() {
          if (sent === ours.length - MiB) {
            sent += 1;
            meanwhile().then(
              () => (refuse ? this.destroy(refuse) : this.push(ours.subarray(ours.length - MiB))),
              (error: unknown) => this.destroy(error instanceof Error ? error : new Error(String(error))),
            );
            return;
          }
          if (sent > ours.length - MiB) {
            this.push(null);
            return;
          }
          this.push(ours.subarray(sent, sent + MiB));
          sent += MiB;
        },
      });
    };
    // The key was empty when the upload began, so it is one create-only PutObject: the store refuses
    // to commit it over the object another writer put first.
    const raced = await rejection(
      store.upload(
        "race/created",
        body(() => putTheirs("race/created")),
        ours.length,
      ),
    );
    t.ok(raced instanceof ObjectStoreError && raced.code === "ObjectExists", `refused: ${String(raced)}`);
    t.equal(await storedHash("race/created"), sha256(theirs), "the other writer's object is whole");

    // The upload's end refused (its run lost the backup to another): no clean-up deletes their object.
    const refused = await rejection(
      store.upload(
        "race/refused",
        body(() => putTheirs("race/refused"), new CommitRefusedError("another run owns this backup")),
        ours.length,
      ),
    );
    t.match(String(refused), /another run owns this backup/, "the upload fails with the refusal");
    await sleep(1_000);
    t.equal(await storedHash("race/refused"), sha256(theirs), "a second later their object is still whole");
  },
);

t.test("a refused put ends the body's producer instead of leaving it waiting", async (t) => {
  // A producer that has sent 1 MiB of 4 and waits to be asked for more, like a snapshot stream
  // held back by the upload.
  const body = new PassThrough();
  body.write(randomBytes(MiB));
  const ended = new Promise<string>((resolve) => body.once("close", () => resolve("closed")));
  t.ok(
    await rejection(putStream(s3, { bucket: "no-such-bucket", key: "x" }, body, 4 * MiB)),
    "the put fails",
  );
  const waited = await Promise.race([
    ended,
    new Promise((resolve) => setTimeout(resolve, 5_000, "still open")),
  ]);
  t.equal(waited, "closed", "the body was ended, so its producer's pipeline ends too");
  t.ok(body.destroyed);
});

t.test("the size a member announces in its first snapshot message", async (t) => {
  t.equal(
    announcedSize({ blobBytes: 32 * 1024, remainingBytes: 1000 }),
    32 * 1024 + 1000 + 32,
    "blob + rest + trailer",
  );
  t.equal(
    announcedSize({ blobBytes: 32 * 1024, remainingBytes: 0 }),
    32 * 1024 + 32,
    "a database in one message",
  );
  t.equal(
    announcedSize({ blobBytes: 0, remainingBytes: 2 ** 64 - 1 }),
    undefined,
    "no safe integer: unknown",
  );
});

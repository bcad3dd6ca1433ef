// The local S3-compatible object store against the real server (versitygw's posix backend): what the
// backups rely on (a streamed multipart upload with @aws-sdk/lib-storage, user metadata, streamed reads,
// prefix listings, deletes) and the errors they must tell apart (bad credentials, missing bucket, store
// down). Then the store as part of a local cluster: on the bridge gateway, reachable from the host and
// from a pod, and gone after stop().
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { promisify } from "node:util";
import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import t from "tap";
import { ensureAssets, VERSITYGW_VERSION } from "../infra/local/assets.ts";
import { daemonStatus, readState, startLocalCluster } from "../infra/local/control-plane.ts";
import { isOurProcess } from "../infra/local/daemons.ts";
import { clientsFor, waitForPod } from "../infra/local/kube-wait.ts";
import { CREDENTIALS_FILE, type ObjectStore, startObjectStore } from "../infra/local/object-store.ts";
import { UPLOAD_SHAPE, unsignedParts } from "../shared/object-store/s3.ts";
import { uploadStream } from "../shared/object-store/s3-multipart.ts";
import { watchRequests } from "./helpers/s3-requests.ts";

const execFileAsync = promisify(execFile);
const MiB = 1024 * 1024;

const assets = await ensureAssets({ only: ["versitygw"], log: (line) => t.comment(line) });
const dir = await mkdtemp(join(tmpdir(), "eop-object-store-"));
t.teardown(() => rm(dir, { recursive: true, force: true }));

const logLines: string[] = [];
const store = await startObjectStore({ dir, host: "127.0.0.1", log: (line) => logLines.push(line) });
t.teardown(() => store.stop());
const s3 = store.client();
t.teardown(() => s3.destroy());

/** What the SDK says about a failed call: the S3 error code and the HTTP status (or a network code). */
async function failureOf(
  promise: Promise<unknown>,
): Promise<{ name: string; status?: number; code?: string }> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof S3ServiceException) {
      return { name: error.name, status: error.$metadata.httpStatusCode };
    }
    const code = error instanceof Error && "code" in error ? String(error.code) : undefined;
    return { name: error instanceof Error ? error.name : String(error), code };
  }
  throw new Error("expected the call to fail, but it succeeded");
}

/** Whether a TCP socket listens on host:port on this machine (from the kernel's table, via ss). */
async function listening(host: string, port: string): Promise<boolean> {
  const { stdout } = await execFileAsync("ss", ["-Hltn", "src", `${host}:${port}`]);
  return stdout.trim() !== "";
}

async function hasLocalAddress(address: string): Promise<boolean> {
  const { stdout } = await execFileAsync("ip", ["-o", "-4", "addr", "show"]);
  return stdout.includes(` ${address}/`);
}

function sha256(data: Buffer): string {
  return createHash("sha256").update(data).digest("hex");
}

/** A stream of unknown length in 1 MiB chunks, as a backup's snapshot stream arrives. */
function chunkedStream(data: Buffer): Readable {
  const chunks: Buffer[] = [];
  for (let offset = 0; offset < data.length; offset += MiB) chunks.push(data.subarray(offset, offset + MiB));
  return Readable.from(chunks, { objectMode: false });
}

t.test("the pinned versitygw build reports its version", async (t) => {
  t.equal(assets.versitygw.version, VERSITYGW_VERSION);
  const { stdout } = await execFileAsync(assets.versitygw.versitygw, ["--version"], { timeout: 30_000 });
  t.match(stdout, `Version  : v${VERSITYGW_VERSION}`);
});

t.test("the store listens where asked and never logs its secret", async (t) => {
  t.match(store.endpoint, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.match(store.accessKeyId, /^[A-Z0-9]{20}$/);
  t.ok(store.secretAccessKey.length >= 40, "a long random secret");
  t.ok(isOurProcess({ pid: store.pid, command: assets.versitygw.versitygw, name: "object-store" }));
  const logged = [...logLines, readFileSync(store.logFile, "utf8")].join("\n");
  t.notMatch(logged, store.secretAccessKey, "neither our log lines nor the store's log carry the secret");
  const config = join(dir, CREDENTIALS_FILE);
  t.equal(statSync(config).mode & 0o777, 0o600, "credentials file is 0600");
  const commandLine = readFileSync(`/proc/${store.pid}/cmdline`, "utf8");
  t.notMatch(commandLine, store.secretAccessKey, "the secret is not on the store's command line");
  // One listener, on the address and port asked for: nothing else of the machine's is taken.
  const { stdout } = await execFileAsync("ss", ["-Hltnp"]);
  const ours = stdout.split("\n").filter((line) => line.includes(`pid=${store.pid},`));
  t.equal(ours.length, 1, `one listening socket (${ours.join(" | ")})`);
  t.match(ours[0], ` ${new URL(store.endpoint).host} `, "on the endpoint's address and port");
});

t.test("createBucket makes a bucket that ListBuckets shows", async (t) => {
  await store.createBucket("backups");
  const buckets = await s3.send(new ListBucketsCommand({}));
  t.ok(buckets.Buckets?.some((b) => b.Name === "backups"));
  const again = await store.createBucket("backups").then(
    () => undefined,
    (error: unknown) => error,
  );
  t.match(again, { message: /creating bucket backups .* failed/ }, "creating it twice fails");
  const cause = again instanceof Error ? again.cause : undefined;
  t.ok(
    cause instanceof S3ServiceException && /^(BucketAlreadyOwnedByYou|BucketAlreadyExists)$/.test(cause.name),
    `with S3's own error as the cause (${cause instanceof Error ? cause.name : String(cause)})`,
  );
});

t.test("a 20 MiB stream round-trips through a multipart upload", async (t) => {
  const data = randomBytes(20 * MiB);
  const digest = sha256(data);
  const key = "cluster-a/3.6.16_0000000000000042_etcd.backup";
  const parts = new Set<number>();
  const upload = new Upload({
    client: s3,
    partSize: 5 * MiB,
    queueSize: 2,
    leavePartsOnError: false,
    params: {
      Bucket: "backups",
      Key: key,
      Body: chunkedStream(data),
      ContentType: "application/octet-stream",
      Metadata: { sha256: digest },
    },
  });
  upload.on("httpUploadProgress", (progress) => {
    if (progress.part !== undefined) parts.add(progress.part);
  });
  const result = await upload.done();
  t.same(
    [...parts].sort((a, b) => a - b),
    [1, 2, 3, 4],
    "four 5 MiB parts",
  );
  t.match(result.ETag, /-4"?$/, "the ETag of a 4-part multipart object");

  const head = await s3.send(new HeadObjectCommand({ Bucket: "backups", Key: key }));
  t.equal(head.ContentLength, 20 * MiB, "HEAD shows the size");
  t.equal(head.Metadata?.sha256, digest, "HEAD shows x-amz-meta-sha256");

  const got = await s3.send(new GetObjectCommand({ Bucket: "backups", Key: key }));
  if (!(got.Body instanceof Readable)) throw new Error("GetObject's body is not a Node stream");
  const hash = createHash("sha256");
  let length = 0;
  let chunks = 0;
  for await (const chunk of got.Body) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
    hash.update(buffer);
    length += buffer.length;
    chunks++;
  }
  t.equal(length, 20 * MiB, "GET streams back every byte");
  t.equal(hash.digest("hex"), digest, "identical bytes");
  t.ok(chunks > 1, `streamed in ${chunks} chunks`);
});

t.test("the backup uploader's parts go with UNSIGNED-PAYLOAD, and the store takes them", async (t) => {
  // A client as openS3Store builds it, plus a spy after signing on what each request carries.
  const client = store.client();
  t.teardown(() => client.destroy());
  unsignedParts(client);
  const sent = watchRequests(client);
  const data = randomBytes(12 * MiB);
  const key = "unsigned/parts.backup";
  const uploaded = await uploadStream(client, { bucket: "backups", key }, chunkedStream(data), UPLOAD_SHAPE);
  t.same(uploaded, { parts: 3, bytes: 12 * MiB });
  const parts = sent.filter((s) => s.command === "UploadPartCommand");
  t.equal(parts.length, 3);
  t.ok(
    parts.every((p) => p.payloadHash === "UNSIGNED-PAYLOAD"),
    "every part's signature leaves its payload out",
  );
  const others = sent.filter((s) => s.command !== "UploadPartCommand");
  t.ok(
    others.length > 0 && others.every((s) => s.payloadHash !== "UNSIGNED-PAYLOAD"),
    `the other requests sign their payload (${others.map((s) => s.command).join(", ")})`,
  );
  const got = await client.send(new GetObjectCommand({ Bucket: "backups", Key: key }));
  if (!(got.Body instanceof Readable)) throw new Error("GetObject's body is not a Node stream");
  const hash = createHash("sha256");
  for await (const chunk of got.Body) hash.update(chunk as Buffer);
  t.equal(hash.digest("hex"), sha256(data), "the store has the same bytes");
});

t.test("ListObjectsV2 with a prefix lists only that prefix", async (t) => {
  const keys = ["cluster-b/1.backup", "cluster-b/2.backup", "cluster-bb/1.backup", "other/1.backup"];
  for (const key of keys) {
    await s3.send(new PutObjectCommand({ Bucket: "backups", Key: key, Body: `content of ${key}` }));
  }
  const listed = await s3.send(new ListObjectsV2Command({ Bucket: "backups", Prefix: "cluster-b/" }));
  t.same(
    listed.Contents?.map((o) => o.Key),
    ["cluster-b/1.backup", "cluster-b/2.backup"],
  );
  t.same(
    listed.Contents?.map((o) => o.Size),
    [`content of cluster-b/1.backup`.length, `content of cluster-b/2.backup`.length],
  );
  const paged = await s3.send(
    new ListObjectsV2Command({ Bucket: "backups", Prefix: "cluster-", MaxKeys: 2 }),
  );
  t.equal(paged.KeyCount, 2);
  t.equal(paged.IsTruncated, true, "MaxKeys pages the listing");
  const rest = await s3.send(
    new ListObjectsV2Command({
      Bucket: "backups",
      Prefix: "cluster-",
      ContinuationToken: paged.NextContinuationToken,
    }),
  );
  t.same(
    rest.Contents?.map((o) => o.Key),
    ["cluster-b/2.backup", "cluster-bb/1.backup"],
    "the next page continues after the first",
  );
});

t.test("a deleted object is gone from HEAD, GET and the listing", async (t) => {
  await s3.send(new DeleteObjectCommand({ Bucket: "backups", Key: "cluster-b/1.backup" }));
  const head = await failureOf(
    s3.send(new HeadObjectCommand({ Bucket: "backups", Key: "cluster-b/1.backup" })),
  );
  t.equal(head.status, 404);
  const get = await failureOf(
    s3.send(new GetObjectCommand({ Bucket: "backups", Key: "cluster-b/1.backup" })),
  );
  t.same(get, { name: "NoSuchKey", status: 404 });
  const listed = await s3.send(new ListObjectsV2Command({ Bucket: "backups", Prefix: "cluster-b/" }));
  t.same(
    listed.Contents?.map((o) => o.Key),
    ["cluster-b/2.backup"],
  );
});

t.test("wrong credentials are refused with 403", async (t) => {
  const wrongSecret = new S3Client({
    endpoint: store.endpoint,
    region: store.region,
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: store.accessKeyId, secretAccessKey: `${store.secretAccessKey}x` },
  });
  const wrongKey = new S3Client({
    endpoint: store.endpoint,
    region: store.region,
    forcePathStyle: true,
    maxAttempts: 1,
    credentials: { accessKeyId: "AKIANOSUCHKEY0000000", secretAccessKey: store.secretAccessKey },
  });
  t.teardown(() => {
    wrongSecret.destroy();
    wrongKey.destroy();
  });
  const put = new PutObjectCommand({ Bucket: "backups", Key: "forged", Body: "x" });
  t.same(await failureOf(wrongSecret.send(put)), { name: "SignatureDoesNotMatch", status: 403 });
  t.same(await failureOf(wrongKey.send(new ListBucketsCommand({}))), {
    name: "InvalidAccessKeyId",
    status: 403,
  });
  const head = await failureOf(s3.send(new HeadObjectCommand({ Bucket: "backups", Key: "forged" })));
  t.equal(head.status, 404, "the forged PUT wrote nothing");
});

t.test("a bucket that does not exist is NoSuchBucket", async (t) => {
  t.same(await failureOf(s3.send(new ListObjectsV2Command({ Bucket: "no-such-bucket" }))), {
    name: "NoSuchBucket",
    status: 404,
  });
  t.same(
    await failureOf(s3.send(new PutObjectCommand({ Bucket: "no-such-bucket", Key: "k", Body: "x" }))),
    { name: "NoSuchBucket", status: 404 },
    "PUT does not create it on the fly",
  );
});

t.test("a stopped store refuses connections and leaves no process", async (t) => {
  await store.stop();
  t.notOk(isOurProcess({ pid: store.pid, command: assets.versitygw.versitygw, name: "object-store" }));
  const failure = await failureOf(s3.send(new ListBucketsCommand({})));
  t.equal(failure.code, "ECONNREFUSED", `the SDK reports ${failure.name} ${failure.code}`);
  await store.stop(); // stopping twice is harmless
});

t.test("startLocalCluster({ objectStore: true }) serves S3 on the bridge gateway", async (t) => {
  const cluster = await startLocalCluster({
    name: "s3store",
    objectStore: true,
    redis: false,
    log: (line) => t.comment(line),
  });
  let stopped = false;
  t.teardown(async () => {
    if (!stopped) await cluster.stop();
  });
  const store: ObjectStore | undefined = cluster.s3;
  if (store === undefined) throw new Error("cluster.s3 is missing");
  const gateway = cluster.network.gateway;
  t.equal(new URL(store.endpoint).hostname, gateway, "the endpoint is the instance's gateway address");

  // What `npm run local -- status` prints: the daemon, and where to reach the store, but no secret.
  const running = daemonStatus("s3store").find((d) => d.name === "object-store");
  t.equal(running?.running, true);
  const state = readState("s3store");
  t.equal(state?.objectStore?.endpoint, store.endpoint);
  t.equal(state?.objectStore?.accessKeyId, store.accessKeyId);
  t.notMatch(JSON.stringify(state), store.secretAccessKey, "the state file has no secret");
  t.match(readFileSync(state?.objectStore?.credentialsFile ?? "", "utf8"), store.secretAccessKey);

  // From the host.
  await store.createBucket("etcd-backups");
  const client = store.client();
  t.teardown(() => client.destroy());
  await client.send(new PutObjectCommand({ Bucket: "etcd-backups", Key: "from-host", Body: "hello pod" }));

  // From a pod in its own network namespace: a SigV4-signed GET of what the host wrote, and a PUT back.
  const { core } = clientsFor(cluster.kubeconfigPath);
  await core.createNamespacedSecret({
    namespace: "default",
    body: {
      metadata: { name: "s3-credentials" },
      stringData: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
    },
  });
  const secretEnv = (name: string, key: string) => ({
    name,
    valueFrom: { secretKeyRef: { name: "s3-credentials", key } },
  });
  const script = [
    "set -e",
    `sig="aws:amz:${store.region}:s3"`,
    // S3 wants the payload's hash header on every SigV4 request (curl does not add it) and a
    // Content-Length on a PUT (so no chunked upload from a pipe: --data-binary reads it all first).
    'hash="x-amz-content-sha256: UNSIGNED-PAYLOAD"',
    `got=$(curl -sSf --aws-sigv4 "$sig" --user "$AK:$SK" -H "$hash" "$ENDPOINT/etcd-backups/from-host")`,
    'test "$got" = "hello pod"',
    `printf 'hello host' | curl -sSf --aws-sigv4 "$sig" --user "$AK:$SK" -H "$hash" -X PUT --data-binary @- "$ENDPOINT/etcd-backups/from-pod"`,
  ].join("\n");
  await core.createNamespacedPod({
    namespace: "default",
    body: {
      metadata: { name: "s3-client" },
      spec: {
        restartPolicy: "Never",
        containers: [
          {
            name: "main",
            image: "busybox",
            command: ["/bin/sh", "-c", script],
            env: [
              { name: "ENDPOINT", value: store.endpoint },
              secretEnv("AK", "accessKeyId"),
              secretEnv("SK", "secretAccessKey"),
            ],
          },
        ],
      },
    },
  });
  const pod = await waitForPod(
    core,
    "default",
    "s3-client",
    "to finish",
    (p) => p.status?.phase === "Succeeded" || p.status?.phase === "Failed",
    60_000,
  );
  t.equal(pod.status?.phase, "Succeeded", "the pod read the host's object and wrote its own");
  t.match(pod.status?.podIP, `${cluster.network.base}.`, "from its own address on the instance's bridge");
  const fromPod = await client.send(new GetObjectCommand({ Bucket: "etcd-backups", Key: "from-pod" }));
  t.equal(await fromPod.Body?.transformToString(), "hello host");

  // After stop() the gateway address itself is gone, so a request to it would be routed off this
  // machine: check the listener and the address locally instead of connecting.
  const port = new URL(store.endpoint).port;
  t.ok(await listening(gateway, port), `${gateway}:${port} is listening before stop()`);
  const pid = store.pid;
  await cluster.stop();
  stopped = true;
  t.notOk(
    isOurProcess({ pid, command: assets.versitygw.versitygw, name: "object-store" }),
    "the process is gone",
  );
  t.notOk(await listening(gateway, port), "nothing listens on the endpoint's port");
  t.notOk(await hasLocalAddress(gateway), "the gateway address is gone with the bridge");
  t.notOk(existsSync(cluster.dir), "the instance's folder (store data included) is removed");
});

// The local OSS server (infra/local/oss-server.ts), driven through the real ali-oss client the
// operator uses, with both signature versions. Tampering tests replay what that client really sent,
// altered, over raw HTTP. The memory test runs the server in its own process (infra/local/oss/cli.ts)
// so that only the server's memory is measured.
import { type ChildProcess, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { connect } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import OSS from "ali-oss";
import t from "tap";
import { type OssServer, startOssServer } from "../infra/local/oss-server.ts";
import { silentLogger } from "../shared/log.ts";

const dir = mkdtempSync(join(tmpdir(), "eop-oss-"));
const BUCKET = "etcd-backups";
const credentials = {
  accessKeyId: "LTAI5tLocalTestKey",
  accessKeySecret: randomBytes(18).toString("base64"),
};
const server = await startOssServer({
  dir: join(dir, "store"),
  credentials: [credentials],
  buckets: [BUCKET],
  log: silentLogger(),
});
t.teardown(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

type SignatureVersion = "V1" | "V4";
const VERSIONS: readonly SignatureVersion[] = ["V1", "V4"];

/** ali-oss options the typings leave out (the client supports them). */
type ClientOptions = OSS.Options & { amendTimeSkewed?: number };

/** An ali-oss client configured the way the operator reaches this server: IP endpoint, default region. */
function ossClient(
  version: SignatureVersion,
  overrides: Partial<ClientOptions> = {},
  on: OssServer = server,
) {
  const options: ClientOptions = {
    endpoint: on.endpoint,
    region: on.region,
    bucket: BUCKET,
    accessKeyId: credentials.accessKeyId,
    accessKeySecret: credentials.accessKeySecret,
    authorizationV4: version === "V4",
    ...overrides,
  };
  return new OSS(options);
}

/** The typings declare response headers as `object`. */
function headerOf(response: { headers: object }, name: string): string | undefined {
  const value: unknown = Reflect.get(response.headers, name);
  return typeof value === "string" ? value : undefined;
}

const md5 = (data: Buffer) => createHash("md5").update(data).digest();
const ossEtag = (data: Buffer) => `"${md5(data).toString("hex").toUpperCase()}"`;

/** x-oss-meta-* as ali-oss's typings want them (uid and pid are required there). */
const userMeta = (extra: Record<string, string>): OSS.UserMeta => ({ uid: 7, pid: 11, ...extra });

t.test("put, get, head and delete round-trip an object with its user metadata", async (t) => {
  for (const version of VERSIONS) {
    const client = ossClient(version);
    const key = `round-trip/${version}/snapshot.db`;
    const body = randomBytes(4096);
    const put = await client.put(key, body, { meta: userMeta({ cluster: "example", revision: "42" }) });
    t.equal(put.res.status, 200, `${version}: put answers 200`);
    t.equal(headerOf(put.res, "etag"), ossEtag(body), `${version}: the ETag is the quoted upper-case MD5`);

    const got = await client.get(key);
    t.ok(Buffer.isBuffer(got.content) && body.equals(got.content), `${version}: get returns the same bytes`);

    const head = await client.head(key);
    t.same(
      head.meta,
      { uid: "7", pid: "11", cluster: "example", revision: "42" },
      `${version}: user metadata`,
    );
    t.equal(headerOf(head.res, "content-length"), "4096", `${version}: head tells the size`);
    t.equal(headerOf(head.res, "x-oss-object-type"), "Normal");

    const deleted = await client.delete(key);
    t.equal(deleted.res.status, 204, `${version}: delete answers 204`);
    await t.rejects(client.get(key), { code: "NoSuchKey", status: 404 }, `${version}: gone after delete`);
    await t.rejects(client.head(key), { code: "NoSuchKey", status: 404 }, `${version}: head of a gone key`);
    const again = await client.delete(key);
    t.equal(again.res.status, 204, `${version}: deleting a missing key is not an error, as on OSS`);
  }
});

t.test("a range get answers 206 with exactly those bytes", async (t) => {
  const client = ossClient("V4");
  const body = randomBytes(1000);
  await client.put("range/object", body);
  const middle = await client.get("range/object", { headers: { Range: "bytes=100-199" } });
  t.equal(middle.res.status, 206);
  t.ok(Buffer.isBuffer(middle.content) && body.subarray(100, 200).equals(middle.content), "bytes 100..199");
  t.equal(headerOf(middle.res, "content-range"), "bytes 100-199/1000");
  const tail = await client.get("range/object", { headers: { Range: "bytes=-10" } });
  t.ok(Buffer.isBuffer(tail.content) && body.subarray(990).equals(tail.content), "the last 10 bytes");
  const past = await client.get("range/object", { headers: { Range: "bytes=2000-3000" } });
  t.equal(past.res.status, 200, "by default OSS ignores a range it cannot satisfy and returns the object");
  t.equal(past.content.length, 1000);
  await t.rejects(
    client.get("range/object", {
      headers: { Range: "bytes=2000-3000", "x-oss-range-behavior": "standard" },
    }),
    { code: "InvalidRange", status: 416 },
    "with x-oss-range-behavior: standard it is 416 InvalidRange",
  );
});

t.test(
  "listings page by prefix and max-keys (v1 markers, v2 continuation tokens) and roll up prefixes",
  async (t) => {
    const setup = ossClient("V1");
    const clusterOne = ["0001", "0002", "0003", "0004", "0005"].map((n) => `list/c1/${n}.db`);
    const keys = [...clusterOne, "list/c2/0001.db", "list/top.txt", "other/x.db"];
    for (const key of keys) await setup.put(key, Buffer.from(key));

    for (const version of VERSIONS) {
      const client = ossClient(version);
      const v1Names: string[] = [];
      let marker: string | undefined;
      let pages = 0;
      for (;;) {
        const page = await client.list(
          { prefix: "list/c1/", "max-keys": 2, ...(marker ? { marker } : {}) },
          {},
        );
        pages += 1;
        v1Names.push(...page.objects.map((object) => object.name));
        if (!page.isTruncated) break;
        marker = page.nextMarker;
      }
      t.same(v1Names, clusterOne, `${version}: v1 pages return every key under the prefix, in order`);
      t.equal(pages, 3, `${version}: 5 keys at max-keys=2 make 3 pages`);

      const v2Names: string[] = [];
      let token: string | undefined;
      pages = 0;
      for (;;) {
        const page = await client.listV2(
          { prefix: "list/", "max-keys": 3, ...(token ? { "continuation-token": token } : {}) },
          {},
        );
        pages += 1;
        t.equal(page.keyCount, page.objects.length, `${version}: KeyCount counts the page`);
        v2Names.push(...page.objects.map((object) => object.name));
        if (!page.isTruncated) break;
        token = page.nextContinuationToken;
      }
      t.same(
        v2Names,
        [...clusterOne, "list/c2/0001.db", "list/top.txt"],
        `${version}: v2 pages cover the prefix`,
      );
      t.equal(pages, 3, `${version}: 7 keys at max-keys=3 make 3 pages`);

      const folders = await client.list({ prefix: "list/", delimiter: "/", "max-keys": 100 }, {});
      t.same(
        folders.prefixes,
        ["list/c1/", "list/c2/"],
        `${version}: the delimiter rolls keys up into prefixes`,
      );
      t.same(
        folders.objects.map((object) => object.name),
        ["list/top.txt"],
        `${version}: only keys without a delimiter after the prefix are listed as objects`,
      );
      const first = (await client.list({ prefix: "list/c1/0003", "max-keys": 1 }, {})).objects[0];
      t.equal(
        first?.size,
        Buffer.byteLength("list/c1/0003.db"),
        `${version}: listed objects carry their size`,
      );
      t.equal(first?.etag, ossEtag(Buffer.from("list/c1/0003.db")), `${version}: and their ETag`);
    }
  },
);

t.test("deleteMulti deletes several keys in one request and reports each", async (t) => {
  const client = ossClient("V4");
  const keys = ["multi/a", "multi/b & c", "multi/<d>"];
  for (const key of keys) await client.put(key, Buffer.from(key));
  const result = await client.deleteMulti([...keys, "multi/never-existed"]);
  t.same(
    [...(result.deleted ?? [])].map((entry) =>
      typeof entry === "string" ? entry : Reflect.get(entry, "Key"),
    ),
    [...keys, "multi/never-existed"],
    "every requested key is reported deleted, XML-special characters intact",
  );
  const left = await client.list({ prefix: "multi/", "max-keys": 100 }, {});
  t.same(left.objects, [], "nothing is left under the prefix");
});

/** A file of `size` random bytes under the test folder. */
function randomFile(name: string, size: number): { path: string; data: Buffer } {
  const data = randomBytes(size);
  const path = join(dir, name);
  writeFileSync(path, data);
  return { path, data };
}

t.test(
  "multipartUpload of a 3.5 MiB file in 1 MiB parts reads back whole, with a multipart ETag",
  async (t) => {
    const file = randomFile("multipart.bin", 3.5 * 1024 * 1024);
    for (const version of VERSIONS) {
      const client = ossClient(version);
      const key = `multipart/${version}/snapshot.db`;
      const result = await client.multipartUpload(key, file.path, {
        partSize: 1024 * 1024,
        parallel: 2,
        meta: userMeta({ cluster: "multipart" }),
      });
      t.equal(result.res.status, 200, `${version}: complete answers 200`);
      t.match(result.etag, /^"[0-9A-F]{32}-4"$/, `${version}: 4 parts give a "<md5>-4" ETag`);
      const got = await client.get(key);
      t.ok(
        Buffer.isBuffer(got.content) && file.data.equals(got.content),
        `${version}: the object is the file`,
      );
      const head = await client.head(key);
      t.equal(head.meta.cluster, "multipart", `${version}: metadata given at initiation is the object's`);
      t.equal(headerOf(head.res, "x-oss-object-type"), "Multipart");
      const range = await client.get(key, { headers: { Range: "bytes=1048570-1048585" } });
      t.ok(
        Buffer.isBuffer(range.content) && file.data.subarray(1048570, 1048586).equals(range.content),
        `${version}: a range across a part boundary is right`,
      );
      const uploads = await client.listUploads({ prefix: `multipart/${version}/` });
      t.same(uploads.uploads, [], `${version}: no upload is left in progress`);
    }
  },
);

t.test("multipart uploads are checked like OSS checks them", async (t) => {
  const client = ossClient("V1");
  const file = randomFile("parts.bin", 3 * 1024 * 1024);
  const mib = 1024 * 1024;
  const key = "checked/object.bin";
  const { uploadId } = await client.initMultipartUpload(key);
  const open = await client.listUploads({ prefix: "checked/" });
  t.same(
    open.uploads.map((upload: { name: string; uploadId: string }) => [upload.name, upload.uploadId]),
    [[key, uploadId]],
    "listUploads shows the upload in progress",
  );
  const part1 = await client.uploadPart(key, uploadId, 1, file.path, 0, mib);
  const part2 = await client.uploadPart(key, uploadId, 2, file.path, mib, mib + 50 * 1024);
  const part3 = await client.uploadPart(key, uploadId, 3, file.path, 2 * mib, 3 * mib);
  t.equal(part1.etag, ossEtag(file.data.subarray(0, mib)), "a part's ETag is its MD5");
  const listed = await client.listParts(key, uploadId);
  t.same(
    listed.parts.map((part) => [Number(Reflect.get(part, "PartNumber")), Number(Reflect.get(part, "Size"))]),
    [
      [1, mib],
      [2, 50 * 1024],
      [3, mib],
    ],
    "listParts lists the uploaded parts and their sizes",
  );
  await t.rejects(
    client.completeMultipartUpload(key, uploadId, [
      { number: 1, etag: part1.etag },
      { number: 2, etag: part3.etag },
    ]),
    { code: "InvalidPart", status: 400 },
    "a part whose ETag does not match is refused",
  );
  await t.rejects(
    client.completeMultipartUpload(key, uploadId, [
      { number: 1, etag: part1.etag },
      { number: 2, etag: part2.etag },
      { number: 3, etag: part3.etag },
    ]),
    { code: "EntityTooSmall", status: 400 },
    "a part under 100 KiB that is not the last is refused",
  );
  await t.rejects(client.get(key), { code: "NoSuchKey" }, "a refused completion leaves no object");
  await client.completeMultipartUpload(key, uploadId, [
    { number: 1, etag: part1.etag },
    { number: 3, etag: part3.etag },
  ]);
  const got = await client.get(key);
  t.ok(
    Buffer.isBuffer(got.content) &&
      Buffer.concat([file.data.subarray(0, mib), file.data.subarray(2 * mib, 3 * mib)]).equals(got.content),
    "the object is exactly the chosen parts, in order; the unchosen part is dropped",
  );
  await t.rejects(
    client.uploadPart(key, uploadId, 4, file.path, 0, 1024),
    { code: "NoSuchUpload", status: 404 },
    "a completed upload takes no more parts",
  );

  const aborted = await client.initMultipartUpload("checked/aborted.bin");
  await client.uploadPart("checked/aborted.bin", aborted.uploadId, 1, file.path, 0, mib);
  await client.abortMultipartUpload("checked/aborted.bin", aborted.uploadId);
  await t.rejects(
    client.uploadPart("checked/aborted.bin", aborted.uploadId, 2, file.path, 0, 1024),
    { code: "NoSuchUpload" },
    "an aborted upload takes no more parts",
  );
  await t.rejects(
    client.uploadPart("checked/other-key.bin", uploadId, 1, file.path, 0, 1024),
    { code: "NoSuchUpload" },
    "an upload id is only valid for its own key",
  );
  t.same((await client.listUploads({ prefix: "checked/" })).uploads, [], "no upload left in progress");
});

t.test("Content-MD5 is checked: a body that does not match it is refused with InvalidDigest", async (t) => {
  for (const version of VERSIONS) {
    const client = ossClient(version);
    const key = `digest/${version}`;
    const claimed = md5(Buffer.from("some other body")).toString("base64");
    await t.rejects(
      client.put(key, Buffer.from("the real body"), { headers: { "Content-MD5": claimed } }),
      { code: "InvalidDigest", status: 400 },
      `${version}: mismatching Content-MD5`,
    );
    await t.rejects(client.head(key), { code: "NoSuchKey" }, `${version}: nothing was stored`);
  }
});

t.test("wrong secrets and unknown access keys are refused", async (t) => {
  for (const version of VERSIONS) {
    await t.rejects(
      ossClient(version, { accessKeySecret: "not-the-secret" }).get("anything"),
      { code: "SignatureDoesNotMatch", status: 403 },
      `${version}: a wrong secret gives SignatureDoesNotMatch`,
    );
    await t.rejects(
      ossClient(version, { accessKeyId: "LTAI5tUnknownKey" }).put("anything", Buffer.from("x")),
      { code: "InvalidAccessKeyId", status: 403 },
      `${version}: an unknown key id gives InvalidAccessKeyId`,
    );
  }
  await t.rejects(ossClient("V4", { accessKeySecret: "nope" }).head("anything"), {
    code: "SignatureDoesNotMatch",
    status: 403,
  });
});

t.test("a client clock 20 minutes off is refused, and so is a V4 signature for another region", async (t) => {
  for (const version of VERSIONS) {
    await t.rejects(
      ossClient(version, { amendTimeSkewed: -20 * 60 * 1000 }).get("anything"),
      { code: "RequestTimeTooSkewed", status: 403 },
      `${version}: a correctly signed but stale request`,
    );
  }
  await t.rejects(
    ossClient("V4", { region: "oss-us-west-1" }).get("anything"),
    { code: "AccessDenied", status: 403 },
    "V4 scopes the signing key to the region",
  );
});

t.test("a missing bucket is NoSuchBucket, a missing key NoSuchKey", async (t) => {
  for (const version of VERSIONS) {
    const elsewhere = ossClient(version, { bucket: "no-such-bucket" });
    await t.rejects(elsewhere.get("k"), { code: "NoSuchBucket", status: 404 }, `${version}: get`);
    await t.rejects(
      elsewhere.put("k", Buffer.from("x")),
      { code: "NoSuchBucket", status: 404 },
      `${version}: put`,
    );
    await t.rejects(elsewhere.list({ "max-keys": 10 }, {}), { code: "NoSuchBucket" }, `${version}: list`);
    await t.rejects(
      ossClient(version).get("no/such/key"),
      { code: "NoSuchKey", status: 404 },
      `${version}: key`,
    );
  }
});

interface RecordedRequest {
  url: string;
  method: string;
  headers: Record<string, string>;
}

interface HttpLibrary {
  request(url: string, params: { method?: string; headers?: Record<string, unknown> }): Promise<unknown>;
}

function isHttpLibrary(value: unknown): value is HttpLibrary {
  return (
    typeof value === "object" && value !== null && "request" in value && typeof value.request === "function"
  );
}

/** Records what ali-oss sends by wrapping the HTTP library it calls (its `urllib` property). */
function recordRequests(client: OSS): RecordedRequest[] {
  const recorded: RecordedRequest[] = [];
  const library: unknown = Reflect.get(client, "urllib");
  if (!isHttpLibrary(library)) throw new Error("ali-oss no longer keeps its HTTP library in client.urllib");
  const recorder: HttpLibrary = {
    request: (url, params) => {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(params.headers ?? {})) {
        if (value !== undefined && value !== null) headers[name.toLowerCase()] = String(value);
      }
      recorded.push({ url, method: params.method ?? "GET", headers });
      return library.request(url, params);
    },
  };
  Reflect.set(client, "urllib", recorder);
  return recorded;
}

/** A raw HTTP request: exactly these headers, nothing added by a client library. */
function rawRequest(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: Buffer,
): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { method, headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () =>
        resolve({
          status: response.statusCode ?? 0,
          headers: response.headers,
          body: Buffer.concat(chunks).toString("utf8"),
        }),
      );
      response.on("error", reject);
    });
    request.on("error", reject);
    request.end(body);
  });
}

const errorCode = (xml: string) => /<Code>([^<]*)<\/Code>/.exec(xml)?.[1];

function without(headers: Record<string, string>, name: string): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([key]) => key !== name));
}

t.test("replayed requests: an exact replay is served, any tampering is refused", async (t) => {
  for (const version of VERSIONS) {
    const client = ossClient(version);
    const recorded = recordRequests(client);
    const key = `replay/${version}/original.txt`;
    await client.put(`replay/${version}/other.txt`, Buffer.from("other"));
    await client.put(key, Buffer.from("original"), { meta: userMeta({ note: "signed" }) });
    await client.get(key);
    const [, put, get] = recorded;
    if (put === undefined || get === undefined) throw new Error("ali-oss did not send the expected requests");
    t.match(
      get.headers.host,
      new RegExp(`^${BUCKET}\\.oss-cn-hangzhou\\.aliyuncs\\.com$`),
      "virtual-host Host",
    );

    const replay = await rawRequest(get.url, "GET", get.headers);
    t.equal(replay.status, 200, `${version}: the same request again (within 15 minutes) is served`);
    t.equal(replay.body, "original");
    t.match(replay.headers["x-oss-request-id"], /^[0-9A-F]{24}$/, "every answer carries a request id");

    const pathStyleHeaders = { ...get.headers, host: `127.0.0.1:${server.port}` };
    const pathStyleUrl = `${server.endpoint}/${BUCKET}/${encodeURI(key)}`;
    const pathStyle = await rawRequest(pathStyleUrl, "GET", pathStyleHeaders);
    t.equal(pathStyle.status, 200, `${version}: path-style addressing names the same resource`);
    t.equal(pathStyle.body, "original");

    const otherKey = await rawRequest(get.url.replace("original.txt", "other.txt"), "GET", get.headers);
    t.equal(otherKey.status, 403, `${version}: the signature does not cover another key`);
    t.equal(errorCode(otherKey.body), "SignatureDoesNotMatch");
    t.match(otherKey.body, /<RequestId>[0-9A-F]{24}<\/RequestId>/, "the XML error names the request");

    const noDate = await rawRequest(get.url, "GET", without(get.headers, "x-oss-date"));
    t.equal(noDate.status, 403, `${version}: a request without its date`);
    t.equal(errorCode(noDate.body), "AccessDenied");

    const stale = new Date(Date.now() - 20 * 60 * 1000);
    const staleDate =
      version === "V1"
        ? stale.toUTCString()
        : stale
            .toISOString()
            .replace(/[-:]/g, "")
            .replace(/\.\d{3}/, "");
    const staleReplay = await rawRequest(get.url, "GET", { ...get.headers, "x-oss-date": staleDate });
    t.equal(errorCode(staleReplay.body), "RequestTimeTooSkewed", `${version}: a date 20 minutes old`);

    const anonymous = await rawRequest(get.url, "GET", without(get.headers, "authorization"));
    t.equal(anonymous.status, 403, `${version}: no Authorization header`);
    t.equal(errorCode(anonymous.body), "AccessDenied");

    const otherMeta = await rawRequest(
      put.url,
      "PUT",
      { ...put.headers, "x-oss-meta-note": "tampered" },
      Buffer.from("original"),
    );
    t.equal(errorCode(otherMeta.body), "SignatureDoesNotMatch", `${version}: changed metadata`);
    const otherBody = await rawRequest(put.url, "PUT", put.headers, Buffer.from("tampered"));
    t.equal(otherBody.status, 400, `${version}: a different body under the signed Content-MD5`);
    t.equal(errorCode(otherBody.body), "InvalidDigest");

    const head = await client.head(key);
    t.equal(head.meta.note, "signed", `${version}: the object kept its metadata`);
    t.equal((await client.get(key)).content.toString(), "original", `${version}: and its content`);
  }
});

t.test("an upload cut off midway leaves neither an object nor a partial file behind", async (t) => {
  const client = ossClient("V1");
  const recorded = recordRequests(client);
  const key = "cut-off/snapshot.db";
  const body = randomBytes(1024 * 1024);
  await client.put(key, body);
  await client.delete(key);
  const put = recorded.find((request) => request.method === "PUT");
  if (put === undefined) throw new Error("ali-oss sent no PUT");
  const store = join(dir, "store");
  const before = bytesOnDisk(store);

  // The same signed PUT again, but the connection breaks after 256 KiB of the 1 MiB body.
  const request = httpRequest(put.url, { method: "PUT", headers: put.headers });
  request.on("error", () => undefined);
  request.write(body.subarray(0, 256 * 1024));
  const deadline = Date.now() + 10_000;
  while (bytesOnDisk(store) - before < 128 * 1024 && Date.now() < deadline) await sleep(10);
  t.ok(bytesOnDisk(store) - before >= 128 * 1024, "the server was writing the body to disk");
  request.destroy();
  while (bytesOnDisk(store) > before && Date.now() < deadline) await sleep(10);
  t.equal(bytesOnDisk(store), before, "the partial body is removed once the client is gone");
  await t.rejects(client.head(key), { code: "NoSuchKey" }, "and no object was created");
});

t.test("buckets can be created, described, listed and deleted once empty", async (t) => {
  const client = ossClient("V1");
  const name = "second-bucket";
  await client.putBucket(name);
  const info = await client.getBucketInfo(name);
  t.equal(Reflect.get(info.bucket, "Name"), name, "getBucketInfo names the bucket");
  t.equal(Reflect.get(info.bucket, "Location"), "oss-cn-hangzhou", "in the server's region");
  const listed: unknown = await client.listBuckets({});
  const buckets: unknown =
    typeof listed === "object" && listed !== null ? Reflect.get(listed, "buckets") : [];
  t.same(
    Array.isArray(buckets) ? buckets.map((bucket: unknown) => Reflect.get(Object(bucket), "name")) : [],
    [BUCKET, name],
    "listBuckets lists both buckets, by name",
  );
  client.useBucket(name);
  await client.put("keep", Buffer.from("x"));
  await t.rejects(
    client.deleteBucket(name),
    { code: "BucketNotEmpty", status: 409 },
    "not while it has objects",
  );
  await client.delete("keep");
  await client.deleteBucket(name);
  await t.rejects(client.getBucketInfo(name), { code: "NoSuchBucket" }, "gone once deleted");
});

t.test("objects survive a restart of the server on the same directory", async (t) => {
  const store = join(dir, "restart-store");
  const first = await startOssServer({
    dir: store,
    credentials: [credentials],
    buckets: [BUCKET],
    log: silentLogger(),
  });
  const body = randomBytes(300 * 1024);
  await ossClient("V1", {}, first).put("kept/snapshot.db", body, { meta: userMeta({ kept: "yes" }) });
  await first.stop();
  const second = await startOssServer({ dir: store, credentials: [credentials], log: silentLogger() });
  t.teardown(() => second.stop());
  const client = ossClient("V4", {}, second);
  const got = await client.get("kept/snapshot.db");
  t.ok(Buffer.isBuffer(got.content) && body.equals(got.content), "the object is there after the restart");
  t.equal((await client.head("kept/snapshot.db")).meta.kept, "yes", "with its metadata");
});

/** The first non-loopback IPv4 address of this machine; 127.0.0.2 when it has none. */
function nonLoopbackAddress(): string {
  for (const entries of Object.values(networkInterfaces())) {
    for (const entry of entries ?? []) if (entry.family === "IPv4" && !entry.internal) return entry.address;
  }
  return "127.0.0.2";
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

t.test("it listens on a non-loopback address, where ali-oss reaches it by IP", async (t) => {
  const address = nonLoopbackAddress();
  const other = await startOssServer({
    dir: join(dir, "address-store"),
    host: address,
    credentials: [credentials],
    buckets: [BUCKET],
    log: silentLogger(),
  });
  t.teardown(() => other.stop());
  t.equal(other.endpoint, `http://${address}:${other.port}`, "the endpoint names that address");
  for (const version of VERSIONS) {
    const client = ossClient(version, {}, other);
    await client.put(`by-ip/${version}`, Buffer.from(address));
    t.equal(
      (await client.get(`by-ip/${version}`)).content.toString(),
      address,
      `${version}: put and get by IP`,
    );
  }
  t.notOk(await canConnect("127.0.0.1", other.port), "it listens on that address only, not on 127.0.0.1");
});

/** Current and peak resident memory of a process, in bytes. */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (field: string) =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? Number.NaN);
  return { rss: kib("VmRSS") * 1024, peak: kib("VmHWM") * 1024 };
}

/** Resets the kernel's peak-RSS (VmHWM) of a process to its current RSS. */
function resetPeak(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
}

/**
 * `size` random bytes produced 64 KiB at a time, never held whole; `digest` sees every byte. With a
 * gate, production stops after `gate.at` bytes until `gate.open` resolves.
 */
async function* randomChunks(
  size: number,
  digest: ReturnType<typeof createHash>,
  gate?: { at: number; open: Promise<void> },
): AsyncGenerator<Buffer> {
  let produced = 0;
  while (produced < size) {
    if (gate !== undefined && produced >= gate.at) await gate.open;
    const chunk = randomBytes(Math.min(64 * 1024, size - produced));
    produced += chunk.length;
    digest.update(chunk);
    yield chunk;
  }
}

/** Bytes in all files under `path`, whatever the server's layout. */
function bytesOnDisk(path: string): number {
  let total = 0;
  for (const entry of readdirSync(path, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    try {
      total += statSync(join(entry.parentPath, entry.name)).size;
    } catch {
      // renamed or removed meanwhile
    }
  }
  return total;
}

async function startServerProcess(
  storeDir: string,
): Promise<{ child: ChildProcess; endpoint: string; region: string }> {
  mkdirSync(storeDir, { recursive: true });
  const child = spawn(
    process.execPath,
    // Prompt young-generation collection: the socket's chunk buffers are garbage as soon as they are
    // written to disk, and RSS should show what the server holds, not garbage the GC has not reached
    // yet. A server that kept the body would still hold all of it.
    ["--max-semi-space-size=1", "infra/local/oss/cli.ts", "--dir", storeDir, "--bucket", BUCKET],
    {
      env: {
        ...process.env,
        OSS_ACCESS_KEY_ID: credentials.accessKeyId,
        OSS_ACCESS_KEY_SECRET: credentials.accessKeySecret,
        LOG_LEVEL: "warn",
      },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const stdout = child.stdout;
  if (stdout === null) throw new Error("no stdout from the OSS server process");
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: stdout }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`the OSS server process exited with ${code}`)));
  });
  const ready: unknown = JSON.parse(line);
  const endpoint = typeof ready === "object" && ready !== null ? Reflect.get(ready, "endpoint") : undefined;
  const region = typeof ready === "object" && ready !== null ? Reflect.get(ready, "region") : undefined;
  if (typeof endpoint !== "string" || typeof region !== "string")
    throw new Error(`unexpected ready line: ${line}`);
  return { child, endpoint, region };
}

t.test("putStream of a 20 MiB chunked stream is written through to disk, not held in memory", async (t) => {
  const storeDir = join(dir, "memory-store");
  const { child, endpoint, region } = await startServerProcess(storeDir);
  t.teardown(() => {
    child.kill("SIGTERM");
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error("the OSS server process has no pid");
  const client = new OSS({ endpoint, region, bucket: BUCKET, ...credentials });
  const mib = 1024 * 1024;

  // One small round first, so one-time costs (code compiled on first use) are not counted.
  await client.putStream("memory/warm-up", Readable.from(randomChunks(4 * mib, createHash("md5"))));
  for await (const _chunk of (await client.getStream("memory/warm-up")).stream) {
    // drained
  }

  const size = 20 * mib;
  const sent = createHash("md5");
  const gate = Promise.withResolvers<void>();
  const diskBefore = bytesOnDisk(storeDir);
  const before = memoryOf(pid);
  resetPeak(pid);
  // No Content-Length: ali-oss sends a stream with chunked transfer encoding.
  const upload = client.putStream(
    "memory/snapshot.db",
    Readable.from(randomChunks(size, sent, { at: 12 * mib, open: gate.promise })),
  );
  // Halfway through, the client stops sending. A streaming server has written what it received.
  const deadline = Date.now() + 15_000;
  while (bytesOnDisk(storeDir) - diskBefore < 11 * mib && Date.now() < deadline) await sleep(20);
  const writtenMidway = bytesOnDisk(storeDir) - diskBefore;
  gate.resolve();
  const put = await upload;
  const uploadGrowth = memoryOf(pid).peak - before.rss;
  t.ok(
    writtenMidway >= 11 * mib,
    `${(writtenMidway / mib).toFixed(1)} MiB were on disk before the body ended`,
  );
  const sentMd5 = sent.digest();
  t.equal(
    headerOf(put.res, "etag"),
    `"${sentMd5.toString("hex").toUpperCase()}"`,
    "the ETag is the stream's MD5",
  );
  // A server that held the body would need at least the 20 MiB at once, on top of the warm-up. A
  // streaming one grows only by the chunks that are garbage and not yet collected (3-7 MiB here).
  t.ok(
    uploadGrowth < size / 2,
    `upload: peak RSS grew by ${(uploadGrowth / mib).toFixed(1)} MiB for a 20 MiB object (limit 10 MiB)`,
  );

  const beforeDownload = memoryOf(pid);
  resetPeak(pid);
  const received = createHash("md5");
  let receivedBytes = 0;
  for await (const chunk of (await client.getStream("memory/snapshot.db")).stream) {
    received.update(chunk);
    receivedBytes += chunk.length;
  }
  const downloadGrowth = memoryOf(pid).peak - beforeDownload.rss;
  t.equal(receivedBytes, size, "the download has every byte");
  t.ok(received.digest().equals(sentMd5), "and the same bytes");
  t.ok(
    downloadGrowth < size / 2,
    `download: peak RSS grew by ${(downloadGrowth / mib).toFixed(1)} MiB for a 20 MiB object (limit 10 MiB)`,
  );
});

// A local server that speaks Aliyun OSS's wire protocol, for the OSS backup and restore tests:
// real OSS cannot run here. It is a protocol-level server, not a mock of our code: the operator
// talks to it with the real ali-oss client, and it behaves like OSS for everything that client
// does in our flows — it checks request signatures (V1 and V4) and clock skew, stores objects on
// disk, streams bodies both ways (snapshots can be GiBs; nothing holds a whole object in memory),
// checks Content-MD5, returns OSS's ETags, headers and XML errors.
//
// Reaching it with ali-oss: give the client an IP endpoint, `endpoint: "http://10.x.y.z:PORT"`
// (or http://127.0.0.1:PORT), keep `region` at the server's (default "oss-cn-hangzhou") and leave
// `cname`/`sldEnable` off. With an IP endpoint ali-oss connects to the IP and sends
// `Host: <bucket>.oss-cn-hangzhou.aliyuncs.com`, the virtual-host addressing this server reads the
// bucket from. Raw HTTP clients can use path style instead: `Host: <ip>:<port>`, `/<bucket>/<key>`.
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { isIP } from "node:net";
import { createLogger, type Logger } from "../../shared/log.ts";
import {
  isValidBucketName,
  objectKeyProblem,
  parseQuery,
  resolveTarget,
  splitRequestUrl,
} from "./oss/addressing.ts";
import { listBuckets } from "./oss/bucket-handlers.ts";
import {
  internalError,
  invalidBucketName,
  invalidObjectName,
  methodNotAllowed,
  OssError,
} from "./oss/errors.ts";
import { type Exchange, locationOf, type OssBackend, sendError } from "./oss/exchange.ts";
import { MultipartUploads } from "./oss/multipart.ts";
import { routeBucketRequest, routeObjectRequest } from "./oss/router.ts";
import { authenticate, MAX_CLOCK_SKEW_MS } from "./oss/signature.ts";
import { ObjectStore } from "./oss/store.ts";

export interface OssCredentials {
  accessKeyId: string;
  accessKeySecret: string;
}

export interface OssServerOptions {
  /** Where buckets and objects live; reused across restarts. */
  dir: string;
  /** Address to listen on (default 127.0.0.1). Use the bridge address for pods to reach it. */
  host?: string;
  /** Default: a free port. */
  port?: number;
  /** The access keys the server accepts. */
  credentials: readonly OssCredentials[];
  /** Buckets to create at start (kept if they exist). */
  buckets?: readonly string[];
  /** Standard region V4 signatures are scoped to, default "cn-hangzhou". */
  region?: string;
  log?: Logger;
}

export interface OssServer {
  /** `http://<host>:<port>`: ali-oss's `endpoint` option. */
  endpoint: string;
  host: string;
  port: number;
  /** ali-oss's `region` option, e.g. "oss-cn-hangzhou". */
  region: string;
  createBucket(name: string): Promise<void>;
  /** Stops listening, lets running requests finish (2 s at most), closes idle keep-alive sockets. */
  stop(): Promise<void>;
}

/** Request ids look like OSS's: 24 upper-case hex digits. */
const newRequestId = () => randomBytes(12).toString("hex").toUpperCase();

const OWNER = { id: "1000000000000000", displayName: "1000000000000000" };

interface ServerSettings {
  secrets: ReadonlyMap<string, string>;
  region: string;
  ownHostNames: ReadonlySet<string>;
}

async function dispatch(x: Exchange, bucket: string | undefined, backend: OssBackend): Promise<void> {
  if (bucket === undefined) {
    if (x.method !== "GET") throw methodNotAllowed(x.method, "Service");
    return listBuckets(x, backend);
  }
  if (!isValidBucketName(bucket)) throw invalidBucketName(bucket);
  if (x.key === "") return routeBucketRequest(x, backend);
  const problem = objectKeyProblem(x.key);
  if (problem !== undefined) throw invalidObjectName(problem);
  return routeObjectRequest(x, backend);
}

async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  backend: OssBackend,
  settings: ServerSettings,
): Promise<void> {
  const started = performance.now();
  const requestId = newRequestId();
  const method = (req.method ?? "GET").toUpperCase();
  const host = req.headers.host ?? "";
  res.setHeader("x-oss-request-id", requestId);
  res.setHeader("server", "AliyunOSS");
  res.setHeader("date", new Date().toUTCString());
  let bucket: string | undefined;
  let key = "";
  try {
    const { path, rawQuery } = splitRequestUrl(req.url);
    const target = resolveTarget(req.headers.host, path, settings.ownHostNames);
    bucket = target.bucket;
    key = target.key;
    const query = parseQuery(rawQuery);
    authenticate(
      { method, headers: req.headers, bucket, key, query },
      { secrets: settings.secrets, region: settings.region, now: new Date(), maxSkewMs: MAX_CLOCK_SKEW_MS },
    );
    await dispatch({ req, res, method, bucket: bucket ?? "", key, query, requestId, host }, bucket, backend);
  } catch (error) {
    if (!(error instanceof OssError))
      backend.log.error({ err: error, requestId, method, bucket, key }, "request failed");
    if (res.headersSent) {
      // Failed while streaming a body: the client sees a truncated response, never a wrong one.
      res.destroy();
    } else {
      sendError(res, method, error instanceof OssError ? error : internalError(), requestId, host);
    }
  } finally {
    // Never the Authorization header or anything secret: just what was asked and the answer.
    backend.log.debug(
      { requestId, method, bucket, key, status: res.statusCode, ms: Math.round(performance.now() - started) },
      "oss request",
    );
  }
}

function checkCredentials(credentials: readonly OssCredentials[]): Map<string, string> {
  if (credentials.length === 0) throw new Error("startOssServer: at least one access key is needed");
  const secrets = new Map<string, string>();
  for (const { accessKeyId, accessKeySecret } of credentials) {
    if (accessKeyId.trim() === "" || accessKeySecret.trim() === "") {
      throw new Error("startOssServer: access key ids and secrets must not be empty");
    }
    // ali-oss trims both before signing.
    secrets.set(accessKeyId.trim(), accessKeySecret.trim());
  }
  return secrets;
}

export async function startOssServer(options: OssServerOptions): Promise<OssServer> {
  const secrets = checkCredentials(options.credentials);
  const host = options.host ?? "127.0.0.1";
  const region = options.region ?? "cn-hangzhou";
  const log = (options.log ?? createLogger()).child({ component: "oss-server" });
  const store = new ObjectStore(options.dir);
  await store.init();
  const backend: OssBackend = { store, uploads: new MultipartUploads(store), region, owner: OWNER, log };
  const createBucket = async (name: string) => {
    if (!isValidBucketName(name)) throw new Error(`invalid OSS bucket name: ${name}`);
    await store.createBucket(name);
  };
  for (const bucket of options.buckets ?? []) await createBucket(bucket);

  const settings: ServerSettings = {
    secrets,
    region,
    // A Host naming the server itself (rather than <bucket>.<domain>) means path-style addressing.
    ownHostNames: new Set(isIP(host) === 0 ? [host.toLowerCase()] : []),
  };
  const server = createServer((req, res) => {
    void handle(req, res, backend, settings);
  });
  // Longer than ali-oss's keep-alive agent keeps idle sockets (15 s), so the client never reuses
  // a socket the server is closing; no overall request timeout, since a snapshot upload may take
  // longer than Node's default 5 minutes.
  server.keepAliveTimeout = 60_000;
  server.headersTimeout = 65_000;
  server.requestTimeout = 0;

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("the OSS server has no TCP address");
  const endpoint = `http://${isIP(host) === 6 ? `[${host}]` : host}:${address.port}`;
  log.info({ endpoint, dir: options.dir, region }, "OSS server listening");

  return {
    endpoint,
    host,
    port: address.port,
    region: locationOf(region),
    createBucket,
    stop: () =>
      new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), 2_000);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      }),
  };
}

// A real S3-compatible object store for the local tests: versitygw (the Versity S3 Gateway,
// Apache-2.0), built from its Go module by assets.ts, serving S3 from its posix backend in one child
// process: a bucket is a folder under the store's data folder, an object a file, its metadata in
// user xattrs. Root credentials are generated per instance, passed in the environment and written
// only to a 0600 file in the store's folder; they are never logged or put on a command line.
//
// Why versitygw (it replaced SeaweedFS): measured on this 2-core machine with our own uploader,
// it costs ~3.5 CPU seconds per GiB uploaded against SeaweedFS's ~11.5 (whose S3 gateway, filer and
// volume server each hashed and copied every byte), serves a download for ~0.2 against ~1.3, answers
// 0.1 s after it starts instead of ~11 s, stops at once, and binds exactly one listener. On two
// cores shared with etcd and the operator, the store's CPU was most of a backup's time.
//
// The store listens on the given host. The control plane passes its bridge gateway (10.78.N.1),
// which the host reaches directly and pods reach from their network namespaces.
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  ListBucketsCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from "@aws-sdk/client-s3";
import { ensureAssets } from "./assets.ts";
import { freePortOn, isOurProcess, type PidRecord, startDaemon, stopDaemon, waitUntil } from "./daemons.ts";

export interface ObjectStoreOptions {
  /** The store's folder: data, IAM state, credentials, log and (by default) pid file. */
  dir: string;
  /** The address the store binds and the endpoint names, e.g. "127.0.0.1" or "10.78.3.1". */
  host: string;
  /** The S3 port; a free one when absent. */
  port?: number;
  log?: (line: string) => void;
  /** Default `<dir>/versitygw.pid`; the control plane keeps it beside its other daemons' pid files. */
  pidFile?: string;
  /** Default `<dir>/versitygw.log`. */
  logFile?: string;
  /** The versitygw binary; default: the pinned build from assets.ts (built when missing). */
  binary?: string;
}

export interface ObjectStore {
  /** e.g. "http://10.78.3.1:41234"; address buckets path-style (`forcePathStyle: true`). */
  endpoint: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  pid: number;
  logFile: string;
  /** Creates a bucket; resolves once it exists. */
  createBucket(name: string): Promise<void>;
  /** A client for this store with its root credentials (the caller destroys it). */
  client(): S3Client;
  /** Stops the server (SIGTERM, then SIGKILL); its data stays in `dir`. */
  stop(): Promise<void>;
}

/** SigV4 needs some region; the store is told this one, and AWS tools default to it. */
export const OBJECT_STORE_REGION = "us-east-1";

/** The file in the store's folder that holds its root credentials, mode 0600. */
export const CREDENTIALS_FILE = "s3-credentials.json";

const READY_TIMEOUT_MS = 30_000;
/** Unauthenticated liveness path (versitygw's --health). */
const HEALTH_PATH = "/health";

export async function startObjectStore(options: ObjectStoreOptions): Promise<ObjectStore> {
  const log = options.log ?? (() => {});
  const binary = options.binary ?? (await ensureAssets({ only: ["versitygw"], log })).versitygw.versitygw;
  const { dir, host } = options;
  const logFile = options.logFile ?? join(dir, "versitygw.log");
  const pidFile = options.pidFile ?? join(dir, "versitygw.pid");
  const dataDir = join(dir, "data");
  // Where versitygw's internal IAM keeps its accounts (none but root here). With it, an unknown
  // access key is refused as S3 does (403 InvalidAccessKeyId) rather than with a 404.
  const iamDir = join(dir, "iam");
  mkdirSync(dataDir, { recursive: true });
  mkdirSync(iamDir, { recursive: true, mode: 0o700 });

  const credentials = generateCredentials();
  writeFileSync(join(dir, CREDENTIALS_FILE), JSON.stringify(credentials, null, 2), { mode: 0o600 });

  const port = options.port ?? (await freePortOn(host));
  const endpoint = `http://${urlHost(host)}:${port}`;
  const record = startDaemon({
    name: "object-store",
    command: binary,
    args: [
      ...["--port", `${urlHost(host)}:${port}`],
      ...["--region", OBJECT_STORE_REGION],
      ...["--health", HEALTH_PATH],
      "--quiet",
      // Without it every request closes its connection (and a backup's parts each dial anew).
      "--keep-alive",
      ...["--iam-dir", iamDir],
      // For profiling the store (bench/backup.ts), e.g. "--pprof 127.0.0.1:6061" serves Go's pprof.
      ...(process.env.OBJECT_STORE_EXTRA_ARGS?.split(" ").filter(Boolean) ?? []),
      "posix",
      // ETags from the data-integrity checksum (CRC64NVME) rather than MD5: MD5 was ~40% of the
      // store's CPU per byte uploaded (3.9 → 2.2 CPU-s per 1.2 GiB), nothing here reads an ETag but
      // to hand the parts' back at completion, and S3's own multipart ETags are no MD5 of the object.
      "--data-integrity-etag",
      dataDir,
    ],
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: dir,
      ROOT_ACCESS_KEY_ID: credentials.accessKeyId,
      ROOT_SECRET_ACCESS_KEY: credentials.secretAccessKey,
    },
    cwd: dir,
    logFile,
    pidFile,
  });
  const store: ObjectStore = {
    endpoint,
    region: OBJECT_STORE_REGION,
    accessKeyId: credentials.accessKeyId,
    secretAccessKey: credentials.secretAccessKey,
    pid: record.pid,
    logFile,
    client: () => s3Client(endpoint, credentials),
    createBucket: async (name) => {
      const client = s3Client(endpoint, credentials);
      try {
        await client.send(new CreateBucketCommand({ Bucket: name }));
      } catch (error) {
        throw new Error(`creating bucket ${name} on the object store at ${endpoint} failed`, {
          cause: error,
        });
      } finally {
        client.destroy();
      }
    },
    stop: () => stopDaemon(record, OBJECT_STORE_STOP_GRACE_MS),
  };
  try {
    await waitUntilServing(store, record, logFile);
  } catch (error) {
    await store.stop();
    throw error;
  }
  log(`object store (versitygw S3) at ${endpoint}, pid ${record.pid}, log ${logFile}`);
  return store;
}

interface Credentials {
  accessKeyId: string;
  secretAccessKey: string;
}

function generateCredentials(): Credentials {
  return {
    // The shape AWS uses (20 upper-case characters), so tools that sanity-check key ids accept it.
    accessKeyId: `EOP${randomBytes(10).toString("hex").toUpperCase().slice(0, 17)}`,
    secretAccessKey: randomBytes(30).toString("base64url"),
  };
}

function s3Client(endpoint: string, credentials: Credentials): S3Client {
  return new S3Client({
    endpoint,
    region: OBJECT_STORE_REGION,
    credentials,
    forcePathStyle: true,
    // Readiness polls and tests want to see a failure, not the SDK's retries of it.
    maxAttempts: 1,
  });
}

/**
 * Ready means what a client needs: the store answers, accepts our signature, and a write round trip
 * works (which also proves the data folder takes the user xattrs the posix backend keeps metadata
 * in: a folder without them fails here, with the store's log in the message). The probe bucket is
 * removed. Together ~0.1 s after the start.
 */
async function waitUntilServing(store: ObjectStore, record: PidRecord, logFile: string): Promise<void> {
  const wait = { timeoutMs: READY_TIMEOUT_MS, intervalMs: 200, alive: () => isOurProcess(record), logFile };
  const healthz = `${store.endpoint}${HEALTH_PATH}`;
  await waitUntil(async () => (await fetch(healthz, { signal: AbortSignal.timeout(2_000) })).ok, {
    what: `object store at ${store.endpoint}`,
    ...wait,
  });
  const client = store.client();
  try {
    await waitUntil(
      async () => {
        await client.send(new ListBucketsCommand({}), { abortSignal: AbortSignal.timeout(5_000) });
        return true;
      },
      { what: "object store (signed ListBuckets)", ...wait },
    );
    await waitUntil(
      async () => {
        await writeRoundTrip(client);
        return true;
      },
      { what: "object store (first write)", ...wait },
    );
  } finally {
    client.destroy();
  }
}

const PROBE_BUCKET = "eop-readiness-probe";

async function writeRoundTrip(client: S3Client): Promise<void> {
  const options = { abortSignal: AbortSignal.timeout(20_000) };
  try {
    await client.send(new CreateBucketCommand({ Bucket: PROBE_BUCKET }), options);
  } catch (error) {
    // Left by an earlier attempt of this loop.
    if (!(error instanceof S3ServiceException && error.name === "BucketAlreadyOwnedByYou")) throw error;
  }
  await client.send(new PutObjectCommand({ Bucket: PROBE_BUCKET, Key: "probe", Body: "ok" }), options);
  await client.send(new DeleteObjectCommand({ Bucket: PROBE_BUCKET, Key: "probe" }), options);
  await client.send(new DeleteBucketCommand({ Bucket: PROBE_BUCKET }), options);
}

/** How long a stop waits after SIGTERM before SIGKILL (versitygw stops within milliseconds). */
export const OBJECT_STORE_STOP_GRACE_MS = 3_000;

function urlHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

// A real S3-compatible object store for the local tests: SeaweedFS's `weed server`, built from its Go
// module by assets.ts, running master, volume server, filer and S3 gateway in one child process with
// its data under the caller's folder. Root credentials are generated per instance and written only to a
// 0600 config file in that folder; they are never logged or put on a command line.
//
// Every SeaweedFS listener binds to the given host. The control plane passes its bridge gateway
// (10.78.N.1), which the host reaches directly and pods reach from their network namespaces.
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
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
import { isOurProcess, type PidRecord, startDaemon, stopDaemon, waitUntil } from "./daemons.ts";

export interface ObjectStoreOptions {
  /** The store's folder: data, metadata, config, log and (by default) pid file. */
  dir: string;
  /** The address every listener binds to and the endpoint names, e.g. "127.0.0.1" or "10.78.3.1". */
  host: string;
  /** The S3 port; a free one when absent. */
  port?: number;
  log?: (line: string) => void;
  /** Default `<dir>/weed.pid`; the control plane keeps it beside its other daemons' pid files. */
  pidFile?: string;
  /** Default `<dir>/weed.log`. */
  logFile?: string;
  /** The weed binary; default: the pinned build from assets.ts (built when missing). */
  weed?: string;
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

/** SigV4 needs some region; SeaweedFS accepts any, and this is what AWS tools default to. */
export const OBJECT_STORE_REGION = "us-east-1";

/** The file in the store's folder that holds its S3 identities (root credentials), mode 0600. */
export const CREDENTIALS_FILE = "s3-identities.json";

const PORTS_FILE = "ports.json";
const READY_TIMEOUT_MS = 60_000;
/** SeaweedFS gives each component an HTTP and a gRPC listener; all of them get ports we chose. */
const COMPONENTS = ["master", "volume", "filer", "s3"] as const;
type Component = (typeof COMPONENTS)[number];
type Ports = Record<Component, { http: number; grpc: number }>;

export async function startObjectStore(options: ObjectStoreOptions): Promise<ObjectStore> {
  const log = options.log ?? (() => {});
  const weed = options.weed ?? (await ensureAssets({ only: ["seaweedfs"], log })).seaweedfs.weed;
  const { dir, host } = options;
  const logFile = options.logFile ?? join(dir, "weed.log");
  const pidFile = options.pidFile ?? join(dir, "weed.pid");
  // Volumes go to data/; the master's raft state and the filer's metadata store to master/.
  for (const sub of ["data", "master"]) mkdirSync(join(dir, sub), { recursive: true });

  const credentials = generateCredentials();
  const configPath = join(dir, CREDENTIALS_FILE);
  writeFileSync(configPath, JSON.stringify(identitiesConfig(credentials), null, 2), { mode: 0o600 });

  const ports = await choosePorts(host, options.port);
  // For removeLeftoverSockets after a crash: the socket paths depend on the ports.
  writeFileSync(join(dir, PORTS_FILE), JSON.stringify(ports));
  const endpoint = `http://${urlHost(host)}:${ports.s3.http}`;
  const record = startDaemon({
    name: "object-store",
    command: weed,
    args: weedServerArgs({ dir, host, ports, configPath }),
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      // SeaweedFS reads master.toml/filer.toml from ".", $HOME/.seaweedfs and /etc/seaweedfs: pointing
      // both at the store's folder keeps a stray config on this machine from changing the store.
      HOME: dir,
      // Each bucket is its own collection, and by default a collection's first write allocates 7
      // volumes; one is plenty here and keeps many test buckets within the volume limit below.
      WEED_MASTER_VOLUME_GROWTH_COPY_1: "1",
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
    stop: () => stopObjectStore(record, ports),
  };
  try {
    await waitUntilServing(store, record, logFile);
  } catch (error) {
    await store.stop();
    throw error;
  }
  log(`object store (SeaweedFS S3) at ${endpoint}, pid ${record.pid}, log ${logFile}`);
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

/** SeaweedFS's static S3 identity file: one identity with every action. Anonymous access is off. */
function identitiesConfig(credentials: Credentials): unknown {
  return {
    identities: [
      {
        name: "eop-root",
        credentials: [{ accessKey: credentials.accessKeyId, secretKey: credentials.secretAccessKey }],
        actions: ["Admin", "Read", "List", "Tagging", "Write"],
      },
    ],
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

interface WeedArgs {
  dir: string;
  host: string;
  ports: Ports;
  configPath: string;
}

function weedServerArgs({ dir, host, ports, configPath }: WeedArgs): string[] {
  return [
    // glog options come before the command: everything goes to stderr, i.e. our log file.
    "-logtostderr=true",
    "-v=0",
    "server",
    `-ip=${host}`,
    `-ip.bind=${host}`,
    `-dir=${join(dir, "data")}`,
    `-master.dir=${join(dir, "master")}`,
    `-master.port=${ports.master.http}`,
    `-master.port.grpc=${ports.master.grpc}`,
    // Nothing here may leave the machine (and there is no internet to report to).
    "-master.telemetry=false",
    // Small volumes, sparse on disk, and enough of them for one collection per test bucket.
    "-master.volumeSizeLimitMB=256",
    "-volume.max=100",
    `-volume.port=${ports.volume.http}`,
    `-volume.port.grpc=${ports.volume.grpc}`,
    // The default waits 10 s after SIGTERM before closing volumes, for load balancers to notice.
    "-volume.preStopSeconds=0",
    "-filer",
    `-filer.port=${ports.filer.http}`,
    `-filer.port.grpc=${ports.filer.grpc}`,
    `-filer.localSocket=${join(dir, "filer.sock")}`,
    "-s3",
    `-s3.port=${ports.s3.http}`,
    `-s3.port.grpc=${ports.s3.grpc}`,
    `-s3.localSocket=${join(dir, "s3.sock")}`,
    `-s3.config=${configPath}`,
    // The Iceberg and Lance catalogs would otherwise take fixed ports (8181, 9101) on the host.
    "-s3.port.iceberg=0",
    "-s3.port.lance=0",
    // Buckets are created on purpose, so a typo in a bucket name shows up as NoSuchBucket.
    "-s3.autoCreateBucket=false",
    // For profiling the store (bench/backup.ts), e.g. "-debug -debug.port=6061" serves Go's pprof.
    ...(process.env.WEED_EXTRA_ARGS?.split(" ").filter(Boolean) ?? []),
  ];
}

/**
 * Ready means what a client needs: the S3 gateway answers, accepts our signature (so it has loaded the
 * identities and reaches the filer), and a write round trip works. The last takes a fresh store some
 * 8-10 s: the master defers its first volume allocation and the filer waits before joining the lock
 * ring that object writes need, both safety delays built into SeaweedFS. The probe bucket is removed.
 */
async function waitUntilServing(store: ObjectStore, record: PidRecord, logFile: string): Promise<void> {
  const wait = { timeoutMs: READY_TIMEOUT_MS, intervalMs: 200, alive: () => isOurProcess(record), logFile };
  const healthz = `${store.endpoint}/healthz`;
  await waitUntil(async () => (await fetch(healthz, { signal: AbortSignal.timeout(2_000) })).ok, {
    what: `object store S3 gateway at ${store.endpoint}`,
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

/**
 * How long a stop waits after SIGTERM before SIGKILL. `weed server` stops its volume server and filer
 * within a second, then its filer spends ~15 s retrying to flush its metadata log to the volume server
 * that is already gone; objects and the filer's store are safe by then, so waiting serves nothing.
 */
export const OBJECT_STORE_STOP_GRACE_MS = 3_000;

/** SIGTERM (SIGKILL after the grace), then the gRPC sockets SeaweedFS always puts in /tmp. */
async function stopObjectStore(record: PidRecord, ports: Ports): Promise<void> {
  await stopDaemon(record, OBJECT_STORE_STOP_GRACE_MS);
  removeGrpcSockets(ports);
}

/** `weed server` puts a socket /tmp/seaweedfs-<component>-grpc-<port>.sock beside each gRPC port. */
function removeGrpcSockets(ports: Ports): void {
  for (const component of COMPONENTS) {
    rmSync(`/tmp/seaweedfs-${component}-grpc-${ports[component].grpc}.sock`, { force: true });
  }
}

/**
 * Removes the /tmp sockets of a store whose process is gone (stopped from its pid file after a crash);
 * does nothing when the folder has no record of its ports.
 */
export function removeLeftoverSockets(dir: string): void {
  const path = join(dir, PORTS_FILE);
  if (!existsSync(path)) return;
  try {
    removeGrpcSockets(JSON.parse(readFileSync(path, "utf8")) as Ports);
  } catch {
    // A torn record (crash while writing it): the sockets are only clutter, weed replaces stale ones.
  }
}

/**
 * Eight free ports on the host, found by holding all of them open at once so no two are the same.
 * (A port could still be taken between here and weed's bind; the start then fails with its log.)
 */
async function choosePorts(host: string, s3Port: number | undefined): Promise<Ports> {
  const servers: Server[] = [];
  try {
    const next = async (): Promise<number> => {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(0, host, () => resolve());
      });
      const address = server.address();
      if (typeof address !== "object" || address === null) throw new Error(`no free port on ${host}`);
      return address.port;
    };
    const pair = async () => ({ http: await next(), grpc: await next() });
    return {
      master: await pair(),
      volume: await pair(),
      filer: await pair(),
      s3: { http: s3Port ?? (await next()), grpc: await next() },
    };
  } finally {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  }
}

function urlHost(host: string): string {
  return host.includes(":") ? `[${host}]` : host;
}

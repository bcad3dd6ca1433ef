// The init containers of a restored seed member, run from the operator's image:
//   node /app/infra/restore-init.ts fetch    download the backup, checking it on the way
//   node /app/infra/restore-init.ts install  move the restored data dir into place
// Between the two, the etcd image's `etcdutl snapshot restore` turns the snapshot into a data dir
// in a staging directory. Init containers can run again (a pod sandbox re-created after a node
// restart), so each step is safe to repeat: fetch starts from a clean staging area, and install
// never replaces a data dir that is already in place (the member may have taken writes since).
import {
  createWriteStream,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { BackupStorageType } from "../shared/api/etcd-backup.ts";
import { RESTORE_DIR, SECRET_DIR, SNAPSHOT_FILE, STAGING_DATA_DIR } from "../shared/restore-paths.ts";

function required(env: NodeJS.ProcessEnv, name: string): string {
  const value = env[name];
  if (!value) throw new Error(`environment variable ${name} is not set`);
  return value;
}

/** A Secret mounted as a volume: one file per key. */
function readMountedSecret(dir: string): Record<string, string> {
  const data: Record<string, string> = {};
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    // Kubernetes mounts keys as symlinks into a ..data directory; skip its bookkeeping entries.
    if (entry.name.startsWith("..")) continue;
    data[entry.name] = readFileSync(join(dir, entry.name), "utf8");
  }
  return data;
}

/** Streams a snapshot from a surviving member into the snapshot file (quorum-loss recovery). */
async function fetchFromMember(endpoint: string, env: NodeJS.ProcessEnv): Promise<void> {
  console.log(`fetching a snapshot from member ${endpoint}`);
  // With client TLS, the operator's client certificate (never printed) and the name to check the
  // member's serving certificate against, since we dial its IP.
  const dir = env.OPERATOR_TLS_DIR;
  const tls = dir
    ? {
        ca: readFileSync(join(dir, "ca.crt"), "utf8"),
        cert: readFileSync(join(dir, "client.crt"), "utf8"),
        key: readFileSync(join(dir, "client.key"), "utf8"),
        serverName: env.MEMBER_SERVER_NAME || undefined,
      }
    : undefined;
  const { openSnapshot, SnapshotDigest } = await import("../shared/etcd-snapshot.ts");
  const snapshot = await openSnapshot(endpoint, { timeoutMs: 10_000, tls });
  const digest = new SnapshotDigest({ wholeHash: false });
  try {
    await pipeline(snapshot.stream, digest, createWriteStream(SNAPSHOT_FILE));
  } finally {
    snapshot.close();
  }
  const result = digest.result();
  console.log(`fetched ${result.size} bytes at revision ≥ ${snapshot.revision}`);
  if (!result.trailerValid) throw new Error("the member's snapshot failed etcd's integrity check");
}

async function fetchBackup(env: NodeJS.ProcessEnv): Promise<void> {
  // A re-run starts from a clean staging area.
  rmSync(RESTORE_DIR, { recursive: true, force: true });
  mkdirSync(RESTORE_DIR, { recursive: true });
  if (env.STORAGE_TYPE === "Member") return fetchFromMember(required(env, "MEMBER_ENDPOINT"), env);
  const type = required(env, "STORAGE_TYPE") as BackupStorageType;
  const path = required(env, "BACKUP_PATH");
  const secretDir = env.SECRET_DIR ?? SECRET_DIR;
  const secretName = env.SECRET_NAME ?? "backup-secret";
  const sections =
    type === "S3"
      ? {
          s3: {
            path,
            awsSecret: secretName,
            endpoint: env.S3_ENDPOINT || undefined,
            forcePathStyle: env.S3_FORCE_PATH_STYLE === "true",
          },
        }
      : { oss: { path, ossSecret: secretName, endpoint: env.OSS_ENDPOINT || undefined } };
  // Loaded here, not at the top: `install` needs neither (see shared/restore-paths.ts).
  const { SnapshotDigest } = await import("../shared/etcd-snapshot.ts");
  const { openStore } = await import("../shared/object-store/index.ts");
  const { store, key } = await openStore(type, sections, async () => readMountedSecret(secretDir));
  try {
    console.log(`fetching ${store.kind.toLowerCase()}://${store.bucket}/${key}`);
    // The operator verified the object and passes its SHA-256: comparing that one hash proves
    // the bytes, and `etcdutl snapshot restore` is told to skip its own pass. Without it (a
    // restore an older operator began), etcdutl checks etcd's trailer and this only copies.
    const expected = env.EXPECT_SHA256 || undefined;
    const digest = new SnapshotDigest(expected ? { trailer: false } : { wholeHash: false, trailer: false });
    const started = Date.now();
    await pipeline(await store.download(key), digest, createWriteStream(SNAPSHOT_FILE));
    const result = digest.result();
    const seconds = (Date.now() - started) / 1000;
    console.log(
      `fetched ${result.size} bytes in ${seconds.toFixed(1)} s${result.sha256 ? `, sha256 ${result.sha256}` : ""}`,
    );
    if (expected && expected !== result.sha256) {
      throw new Error(`checksum mismatch: the backup's sha256 is ${result.sha256}, expected ${expected}`);
    }
  } finally {
    store.close();
  }
}

function installDataDir(env: NodeJS.ProcessEnv): void {
  const dataDir = env.DATA_DIR ?? "/var/etcd/data";
  if (existsSync(join(dataDir, "member"))) {
    console.log(`${dataDir} is already in place; keeping it`);
  } else {
    if (!existsSync(join(STAGING_DATA_DIR, "member")))
      throw new Error(`no restored data dir at ${STAGING_DATA_DIR}`);
    rmSync(dataDir, { recursive: true, force: true });
    renameSync(STAGING_DATA_DIR, dataDir);
    console.log(`restored data dir moved to ${dataDir}`);
  }
  rmSync(RESTORE_DIR, { recursive: true, force: true });
}

async function main(argv: string[]): Promise<void> {
  const command = argv[0];
  if (command === "fetch") return fetchBackup(process.env);
  if (command === "install") return installDataDir(process.env);
  throw new Error(`usage: restore-init.ts fetch|install (got "${command ?? ""}")`);
}

if (import.meta.main) {
  main(process.argv.slice(2)).then(
    () => process.exit(0),
    (error: unknown) => {
      const message = error instanceof Error ? error.message : String(error);
      console.error(`restore-init: ${message}`);
      // What `kubectl describe pod` shows as the container's termination message.
      try {
        writeFileSync("/dev/termination-log", message);
      } catch {
        // Not in a pod (a manual run): stderr has it.
      }
      process.exit(1);
    },
  );
}

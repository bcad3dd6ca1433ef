// The init containers of a restored seed member, run from the operator's image:
//   node /app/infra/restore-init.ts fetch        download the backup, checking it on the way
//   node /app/infra/restore-init.ts install      move the restored data dir into place
//   node /app/infra/restore-init.ts await-start  wait until the operator lets etcd start
// Between the first two, the etcd image's `etcdutl snapshot restore` turns the snapshot into a
// data dir in a staging directory. The last one is there when the seeds are prepared while the old
// members still serve: etcd must not start until they are gone. Init containers can run again (a
// pod sandbox re-created after a node restart), so each step is safe to repeat: fetch starts from a
// clean staging area, install never replaces a data dir that is already in place (the member may
// have taken writes since), and the gate does not wait again once it has let etcd start.
import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import type { StorageSections } from "../shared/object-store/storages.ts";
import {
  BAD_BACKUP_EXIT_CODE,
  RESTORE_DIR,
  SECRET_DIR,
  SNAPSHOT_FILE,
  STAGING_DATA_DIR,
  START_GATE_PATH,
  START_GATE_PORT,
  START_GATE_TOKEN_HEADER,
  START_MARKER,
} from "../shared/restore-paths.ts";
import { SnapshotChecksums } from "../shared/snapshot-digest.ts";

/** The backup's bytes are not the backup's: trying again cannot help (exit BAD_BACKUP_EXIT_CODE). */
class BadBackupError extends Error {
  override name = "BadBackupError";
}

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

/**
 * Writes the fetched bytes to `file`, each chunk through `checks` first, with blocking writes: the
 * init container does nothing else meanwhile. A stream pipeline (a Transform into fs.WriteStream)
 * cost more: three seeds downloading 1.2 GiB each at once on two cores took 7.2–7.7 s and 13.5–14.2
 * CPU-s with it, 5.8–6.3 s and 10.8–11.6 CPU-s so.
 */
async function saveChecked(
  source: AsyncIterable<Buffer>,
  file: string,
  checks: SnapshotChecksums,
): Promise<void> {
  const fd = openSync(file, "w");
  try {
    for await (const chunk of source) {
      checks.update(chunk);
      for (let written = 0; written < chunk.length; ) written += writeSync(fd, chunk, written);
    }
  } finally {
    closeSync(fd);
  }
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
  const { openSnapshot } = await import("../shared/etcd-snapshot.ts");
  const snapshot = await openSnapshot(endpoint, { timeoutMs: 10_000, tls });
  const digest = new SnapshotChecksums({ wholeHash: false, crc32: false });
  try {
    await saveChecked(snapshot.stream, SNAPSHOT_FILE, digest);
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
  const type = required(env, "STORAGE_TYPE");
  const secretDir = env.SECRET_DIR ?? SECRET_DIR;
  // The store SDKs load here, not at the top: `install` and `await-start` need none (see
  // shared/restore-paths.ts).
  const { openStore } = await import("../shared/object-store/index.ts");
  const { isStorageType, STORAGES } = await import("../shared/object-store/storages.ts");
  if (!isStorageType(type)) throw new Error(`STORAGE_TYPE "${type}" is not a storage type`);
  const sections: StorageSections = {
    [STORAGES[type].section]: JSON.parse(required(env, "STORAGE_SECTION")),
  };
  const { store, key } = await openStore(type, sections, async () => readMountedSecret(secretDir));
  const where = `${store.kind.toLowerCase()}://${store.bucket}/${key}`;
  try {
    console.log(`fetching ${where}`);
    // The fetch proves the bytes, so `etcdutl snapshot restore` is told to skip its own pass. With
    // the CRC-32 the backup recorded (passed by the operator), it compares that (zlib's native
    // CRC-32 costs a seed a third of a SHA-256 pass; the backup checked etcd's trailer over the
    // same bytes when it took them); with only a SHA-256 recorded (older backups), that; with
    // neither, etcd's trailer. The old members keep serving until every seed got this far.
    const expectedCrc = env.EXPECT_CRC32 || undefined;
    const expectedSha = expectedCrc ? undefined : env.EXPECT_SHA256 || undefined;
    const expectedSize = env.EXPECT_SIZE ? Number(env.EXPECT_SIZE) : undefined;
    const digest = new SnapshotChecksums(
      expectedCrc
        ? { wholeHash: false, trailer: false }
        : expectedSha
          ? { trailer: false, crc32: false }
          : { wholeHash: false, crc32: false },
    );
    const started = Date.now();
    await saveChecked(await store.download(key), SNAPSHOT_FILE, digest);
    const result = digest.result();
    const seconds = (Date.now() - started) / 1000;
    const proof = result.crc32 ? `, crc32 ${result.crc32}` : result.sha256 ? `, sha256 ${result.sha256}` : "";
    console.log(`fetched ${result.size} bytes in ${seconds.toFixed(1)} s${proof}`);
    // The same words as the operator's own check of a backup (functions/restore.ts).
    if (expectedCrc && expectedCrc !== result.crc32) {
      throw new BadBackupError(
        `backup ${where} is corrupt: its CRC-32 is ${result.crc32}, the backup recorded ${expectedCrc}`,
      );
    }
    if (expectedSha && expectedSha !== result.sha256) {
      throw new BadBackupError(
        `backup ${where} is corrupt: its SHA-256 is ${result.sha256}, the backup recorded ${expectedSha}`,
      );
    }
    if (expectedSize !== undefined && expectedSize !== result.size) {
      throw new BadBackupError(
        `backup ${where} is truncated: ${result.size} bytes, the backup recorded ${expectedSize}`,
      );
    }
    if (!expectedCrc && !expectedSha && result.trailerValid !== true) {
      throw new BadBackupError(
        `backup ${where} is corrupt or truncated: etcd's snapshot hash does not match its data`,
      );
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

/**
 * Holds the seed's etcd back until the operator says the old members are gone: it answers on
 * etcd's client port (free until etcd runs), and a POST that carries the restore's token lets
 * etcd start. Once let through, a marker on the data volume lets a re-run pass at once.
 */
async function awaitStart(env: NodeJS.ProcessEnv): Promise<void> {
  const marker = env.START_MARKER || START_MARKER;
  if (existsSync(marker)) {
    console.log("etcd was let start before; going on");
    return;
  }
  const token = required(env, "START_TOKEN");
  const port = Number(env.START_PORT || START_GATE_PORT);
  const started = Date.now();
  await new Promise<void>((resolve, reject) => {
    const server = createServer((req, res) => {
      const json = (status: number, body: object, then?: () => void) => {
        res.writeHead(status, { "content-type": "application/json", connection: "close" });
        res.end(JSON.stringify(body), then);
      };
      if (req.url !== START_GATE_PATH) return json(404, { error: "not found" });
      if (req.method !== "POST") return json(200, { waiting: true });
      if (req.headers[START_GATE_TOKEN_HEADER] !== token) return json(403, { error: "wrong restore token" });
      // Written (and on disk) before the answer: the operator counts an answered gate as open.
      const fd = openSync(marker, "w");
      try {
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      json(200, { starting: true }, () => {
        server.close();
        server.closeAllConnections();
        resolve();
      });
    });
    server.once("error", reject);
    // Said once listening: whoever reads this (a test, a person) can open the gate from then on.
    server.listen(port, () =>
      console.log("restored data dir in place; waiting for the old members to be gone before etcd starts"),
    );
  });
  console.log(`let start by the operator after ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

async function main(argv: string[]): Promise<void> {
  const command = argv[0];
  if (command === "fetch") return fetchBackup(process.env);
  if (command === "install") return installDataDir(process.env);
  if (command === "await-start") return awaitStart(process.env);
  throw new Error(`usage: restore-init.ts fetch|install|await-start (got "${command ?? ""}")`);
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
      process.exit(error instanceof BadBackupError ? BAD_BACKUP_EXIT_CODE : 1);
    },
  );
}

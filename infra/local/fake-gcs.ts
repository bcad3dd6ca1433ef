// Google Cloud Storage for the local tests: fake-gcs-server (github.com/fsouza/fake-gcs-server,
// built from its Go module by assets.ts), which speaks GCS's JSON API, its simple, multipart and
// resumable uploads and its downloads, storing objects on disk. Real GCS cannot run here; it checks
// no credentials (docs/local-control-plane.md says what else it does not check).
//
// The server listens on the given host (the control plane's bridge gateway, reachable from the
// host and from pods); resumable upload sessions are addressed with the same URL.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ensureAssets } from "./assets.ts";
import { awaitServing, freePortOn, startDaemon, stopDaemon } from "./daemons.ts";

export interface FakeGcsOptions {
  dir: string;
  host: string;
  port?: number;
  log?: (line: string) => void;
}

export interface FakeGcs {
  /** e.g. "http://10.78.3.1:41234": an EtcdBackup's gcs.endpoint. */
  endpoint: string;
  pid: number;
  logFile: string;
  /** Creates a bucket (the server's JSON API, as a client would). */
  createBucket(name: string): Promise<void>;
  stop(): Promise<void>;
}

export async function startFakeGcs(options: FakeGcsOptions): Promise<FakeGcs> {
  const { dir, host } = options;
  const binary = (await ensureAssets({ only: ["fake-gcs"], log: options.log })).fakeGcs.fakeGcsServer;
  mkdirSync(join(dir, "data"), { recursive: true });
  const port = options.port ?? (await freePortOn(host));
  const endpoint = `http://${host}:${port}`;
  const logFile = join(dir, "fake-gcs-server.log");
  const record = startDaemon({
    name: "fake-gcs-server",
    command: binary,
    args: [
      ...["-scheme", "http", "-host", host, "-port", String(port)],
      ...["-backend", "filesystem", "-filesystem-root", join(dir, "data")],
      // The URL it gives resumable upload sessions and download links.
      ...["-external-url", endpoint, "-public-host", `${host}:${port}`],
      ...["-log-level", "warn"],
    ],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir },
    cwd: dir,
    logFile,
    pidFile: join(dir, "fake-gcs-server.pid"),
  });
  const stop = () => stopDaemon(record, 5_000);
  await awaitServing(record, {
    url: `${endpoint}/storage/v1/b`,
    what: `fake-gcs-server at ${endpoint}`,
    logFile,
    serving: (answer) => answer.ok,
    stop,
  });
  options.log?.(`Google Cloud Storage (fake-gcs-server) at ${endpoint}, pid ${record.pid}, log ${logFile}`);
  return {
    endpoint,
    pid: record.pid,
    logFile,
    async createBucket(name) {
      const answer = await fetch(`${endpoint}/storage/v1/b?project=local`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name }),
      });
      if (!answer.ok)
        throw new Error(`creating bucket ${name} on ${endpoint}: ${answer.status} ${await answer.text()}`);
    },
    stop,
  };
}

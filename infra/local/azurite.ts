// Azure Blob Storage for the local tests: Azurite, Microsoft's own Azure Storage server (npm package
// `azurite`, a dev dependency), its blob service alone in one child process. It checks Shared Key
// signatures like Azure does; the account and its key are generated per instance, passed in the
// environment and never logged. Real Azure cannot run here; docs/local-control-plane.md says what
// Azurite does not check.
//
// The server listens on the given host: the control plane's bridge gateway, which the host reaches
// directly and pods reach from their network namespaces. Its URLs are path-style:
// http://<host>:<port>/<account>/<container>/<blob>.
import { randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { awaitServing, freePortOn, startDaemon, stopDaemon } from "./daemons.ts";

export interface AzuriteOptions {
  /** Data, log and pid file. */
  dir: string;
  host: string;
  port?: number;
  log?: (line: string) => void;
}

export interface Azurite {
  /** The account's blob endpoint, e.g. "http://10.78.3.1:41234/eopaccount": a Secret's storage-endpoint. */
  endpoint: string;
  account: string;
  key: string;
  pid: number;
  logFile: string;
  /** Stops the server; its data stays in `dir`. */
  stop(): Promise<void>;
}

/** Azurite's blob service entry point, from the installed package. */
function azuriteBlobMain(): string {
  const require = createRequire(import.meta.url);
  return join(require.resolve("azurite/package.json"), "..", "dist", "src", "blob", "main.js");
}

export async function startAzurite(options: AzuriteOptions): Promise<Azurite> {
  const { dir, host } = options;
  mkdirSync(join(dir, "data"), { recursive: true });
  const port = options.port ?? (await freePortOn(host));
  const account = `eop${randomBytes(4).toString("hex")}`;
  const key = randomBytes(64).toString("base64");
  const logFile = join(dir, "azurite.log");
  const record = startDaemon({
    name: "azurite",
    command: process.execPath,
    args: [
      azuriteBlobMain(),
      ...["--blobHost", host, "--blobPort", String(port)],
      ...["--location", join(dir, "data")],
      // The SDK may be newer than the server: the API version it asks for is not refused for that.
      "--skipApiVersionCheck",
      // Path-style URLs whatever the host name is (pods and the host use an IP address).
      "--disableProductStyleUrl",
      "--silent",
    ],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dir, AZURITE_ACCOUNTS: `${account}:${key}` },
    cwd: dir,
    logFile,
    pidFile: join(dir, "azurite.pid"),
  });
  const endpoint = `http://${host}:${port}/${account}`;
  const stop = () => stopDaemon(record, 5_000);
  // Any HTTP answer means it serves; an unsigned request is refused with 403.
  await awaitServing(record, { url: `${endpoint}?comp=list`, what: `Azurite at ${endpoint}`, logFile, stop });
  options.log?.(`Azure Blob Storage (Azurite) at ${endpoint}, pid ${record.pid}, log ${logFile}`);
  return { endpoint, account, key, pid: record.pid, logFile, stop };
}

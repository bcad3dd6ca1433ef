// Background processes of the local control plane (etcd, kube-apiserver, kube-controller-manager,
// the process kubelet, Redis). Each one is started detached with its own process group and a pid
// file, so a later `down` or a start after a crash can find and stop it even when the process that
// started it is gone. Before signalling a pid from a file we check /proc/<pid>/cmdline, so a
// recycled pid of an unrelated process is never killed.
import { spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

export interface DaemonSpec {
  name: string;
  command: string;
  args: string[];
  env?: Record<string, string>;
  logFile: string;
  pidFile: string;
  cwd?: string;
  /**
   * Run in this network namespace (a name under /var/run/netns) and in no other new namespace:
   * nsenter execs the command in place, so the pid file still names it. (Not `ip netns exec`,
   * which also remounts /sys and so hides the cgroup mounts a kubelet and runc need.)
   */
  netns?: string;
}

export interface PidRecord {
  pid: number;
  /** The executable path, checked against /proc before the pid is signalled. */
  command: string;
  name: string;
}

export function startDaemon(spec: DaemonSpec): PidRecord {
  const out = openSync(spec.logFile, "a");
  try {
    const [command, args] = spec.netns
      ? ["nsenter", [`--net=/var/run/netns/${spec.netns}`, "--", spec.command, ...spec.args]]
      : [spec.command, spec.args];
    const child = spawn(command, args, {
      cwd: spec.cwd,
      env: spec.env ?? { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      detached: true,
      stdio: ["ignore", out, out],
    });
    if (child.pid === undefined) throw new Error(`could not start ${spec.name} (${spec.command})`);
    child.unref();
    const record: PidRecord = { pid: child.pid, command: spec.command, name: spec.name };
    writeFileSync(spec.pidFile, JSON.stringify(record));
    return record;
  } finally {
    closeSync(out);
  }
}

export function readPidFile(path: string): PidRecord | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const parsed: unknown = JSON.parse(readFileSync(path, "utf8"));
    if (
      typeof parsed === "object" &&
      parsed !== null &&
      "pid" in parsed &&
      typeof parsed.pid === "number" &&
      "command" in parsed &&
      typeof parsed.command === "string"
    ) {
      const name = "name" in parsed && typeof parsed.name === "string" ? parsed.name : parsed.command;
      return { pid: parsed.pid, command: parsed.command, name };
    }
  } catch {
    // A torn pid file (crash while writing) is treated as absent.
  }
  return undefined;
}

/**
 * True when the pid is alive AND still runs the executable we started (not a recycled pid).
 * Compares /proc/<pid>/exe rather than the command line, which some daemons rewrite (Redis
 * replaces its argv with "redis-server 127.0.0.1:port").
 */
export function isOurProcess(record: PidRecord): boolean {
  try {
    const stat = readFileSync(`/proc/${record.pid}/stat`, "utf8");
    // A zombie still has a /proc entry but nothing left to stop.
    if (/^\d+ \(.*\) Z/.test(stat)) return false;
    return realpathSync(`/proc/${record.pid}/exe`) === realpathSync(record.command);
  } catch {
    return false;
  }
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // Already gone.
    }
  }
}

/** SIGTERM the daemon's process group, wait up to graceMs, then SIGKILL. Resolves when it is gone. */
export async function stopDaemon(record: PidRecord, graceMs = 10_000): Promise<void> {
  if (!isOurProcess(record)) return;
  signalGroup(record.pid, "SIGTERM");
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!isOurProcess(record)) return;
    await sleep(50);
  }
  signalGroup(record.pid, "SIGKILL");
  const killDeadline = Date.now() + 5_000;
  while (isOurProcess(record) && Date.now() < killDeadline) await sleep(20);
}

export async function stopDaemonFromPidFile(pidFile: string, graceMs?: number): Promise<void> {
  const record = readPidFile(pidFile);
  if (record) await stopDaemon(record, graceMs);
  rmSync(pidFile, { force: true });
}

/** A free TCP port on loopback (see freePortOn). */
export function freePort(): Promise<number> {
  return freePortOn("127.0.0.1");
}

/**
 * Ports handed to daemons come from below the kernel's ephemeral range (32768–60999 by default):
 * a port the kernel picked from that range could be taken by any outgoing connection before the
 * daemon binds it (etcd once failed so: "bind: address already in use"). Below Kubernetes's
 * NodePort range (30000–32767) too.
 */
const DAEMON_PORTS = { first: 20_000, last: 29_999 };

function canListen(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}

/**
 * A TCP port free on this address now, outside the ephemeral range. Another daemon could still
 * take it before the caller binds it; the daemon's start then fails with its log.
 */
export async function freePortOn(host: string): Promise<number> {
  const span = DAEMON_PORTS.last - DAEMON_PORTS.first + 1;
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = DAEMON_PORTS.first + Math.floor(Math.random() * span);
    if (await canListen(port, host)) return port;
  }
  throw new Error(`no free port between ${DAEMON_PORTS.first} and ${DAEMON_PORTS.last} on ${host}`);
}

export interface WaitOptions {
  what: string;
  timeoutMs: number;
  intervalMs?: number;
  /** Checked on every round: lets a wait fail fast when the daemon already died. */
  alive?: () => boolean;
  logFile?: string;
}

/** The last lines of a log file, for error messages that explain why a daemon did not come up. */
export function tailFile(path: string, lines = 20): string {
  try {
    return readFileSync(path, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

export async function waitUntil(check: () => Promise<boolean>, options: WaitOptions): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch (error) {
      lastError = error;
    }
    if (options.alive && !options.alive()) {
      const log = options.logFile
        ? `\n--- last lines of ${options.logFile} ---\n${tailFile(options.logFile)}`
        : "";
      throw new Error(`${options.what}: the process exited before it became ready${log}`);
    }
    await sleep(options.intervalMs ?? 100);
  }
  const log = options.logFile
    ? `\n--- last lines of ${options.logFile} ---\n${tailFile(options.logFile)}`
    : "";
  throw new Error(`${options.what}: not ready after ${options.timeoutMs} ms${log}`, { cause: lastError });
}

/**
 * Waits until a daemon just started answers `url` as `serving` says (default: any HTTP answer), or
 * stops it and throws with its log's last lines: a server that never came up is not left running.
 */
export async function awaitServing(
  record: PidRecord,
  options: {
    url: string;
    what: string;
    logFile: string;
    timeoutMs?: number;
    serving?: (answer: Response) => boolean;
    stop: () => Promise<void>;
  },
): Promise<void> {
  const serving = options.serving ?? (() => true);
  try {
    await waitUntil(async () => serving(await fetch(options.url, { signal: AbortSignal.timeout(2_000) })), {
      what: options.what,
      timeoutMs: options.timeoutMs ?? 30_000,
      alive: () => isOurProcess(record),
      logFile: options.logFile,
    });
  } catch (error) {
    await options.stop();
    throw error;
  }
}

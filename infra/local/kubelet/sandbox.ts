// Linux primitives for the process kubelet: a bridge, one network namespace per pod (veth + IP on the
// bridge), and containers that are plain host processes in their pod's netns plus their own mount + UTS
// namespace with bind-mounted volumes. Everything goes through ip(8), unshare(1), nsenter(1) and a static
// init script, always with argv arrays: no user string is ever part of a shell command line.
//
// Needs root. The host never forwards or NATs pod traffic (this module does not touch ip_forward or
// firewall rules), so pods reach each other and the host over the bridge, and nothing else.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { accessSync, closeSync, existsSync, constants as fsConstants, openSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { isIPv4 } from "node:net";
import { constants as osConstants } from "node:os";
import { fileURLToPath } from "node:url";

/** The bridge all pods hang off; the host reaches pods through its gateway address. */
export interface BridgeNetwork {
  bridge: string;
  /** e.g. "10.77.0.0/24" */
  cidr: string;
  /** e.g. "10.77.0.1": the bridge's own address and every pod's default route. */
  gateway: string;
}

export interface PodNetwork {
  /** Name under /var/run/netns. */
  netns: string;
  ip: string;
  prefixLength: number;
  gateway: string;
  bridge: string;
  /** Host end of the veth pair (≤ 15 chars); the pod end is always eth0. */
  vethHost: string;
}

export interface Mount {
  /** Host path of a file or directory. */
  source: string;
  /** Absolute path where the container sees it; created on the host when missing. */
  target: string;
  readOnly?: boolean;
}

export interface ContainerSpec {
  netns: string;
  /** Empty string: keep the host's name. */
  hostname: string;
  mounts: Mount[];
  workingDir?: string;
  /** The container's whole environment: nothing is inherited from the kubelet. */
  env: Record<string, string>;
  command: string[];
  /** stdout and stderr are appended here. */
  logFile: string;
}

export interface ExecResult {
  /** The command's exit status, or 128 + signal number when a signal ended it. */
  exitCode: number;
  stdout: string;
  stderr: string;
  /** The command ran past its timeout and was killed (with everything in its process group). */
  timedOut: boolean;
}

/** Exit status of container-init.sh when it cannot set the container up (details in the log). */
export const INIT_FAILURE_EXIT_CODE = 125;

const INIT_SCRIPT = fileURLToPath(new URL("./container-init.sh", import.meta.url));
const NETNS_DIR = "/var/run/netns";
const COMMAND_TIMEOUT_MS = 30_000;
/** Exec probes only need the start of the output; this keeps a chatty command from eating memory. */
const EXEC_OUTPUT_LIMIT = 64 * 1024;
const KILL_WAIT_MS = 5_000;

// ---------------------------------------------------------------------------------------------------
// Bridge

/** Creates the bridge if missing, gives it `gateway/prefix` and brings it up. Safe to call repeatedly. */
export async function ensureBridge(net: BridgeNetwork): Promise<void> {
  checkIfName(net.bridge);
  const prefix = cidrPrefixLength(net.cidr);
  if (!isIPv4(net.gateway)) throw new Error(`bridge gateway is not an IPv4 address: ${net.gateway}`);
  const kind = await linkKind(net.bridge);
  if (kind === undefined) {
    await ip(["link", "add", "name", net.bridge, "type", "bridge"]);
  } else if (kind !== "bridge") {
    throw new Error(`${net.bridge} exists but is a ${kind || "plain"} link, not a bridge`);
  }
  // "replace" rather than "add" so a second call is a no-op instead of "File exists".
  await ip(["addr", "replace", `${net.gateway}/${prefix}`, "dev", net.bridge]);
  await ip(["link", "set", "dev", net.bridge, "up"]);
}

/** Deletes the bridge; no error if it is already gone. */
export async function deleteBridge(name: string): Promise<void> {
  checkIfName(name);
  if ((await linkKind(name)) !== undefined) await ip(["link", "del", "dev", name]);
}

// ---------------------------------------------------------------------------------------------------
// Pod networks

/**
 * Creates netns `p.netns` with eth0 = `p.ip/p.prefixLength`, lo up and a default route via the gateway,
 * wired to the bridge through veth `p.vethHost`. Leftovers of the same names (a crashed run) are
 * deleted first, and a half-built network is removed again when a step fails.
 */
export async function createPodNetwork(p: PodNetwork): Promise<void> {
  checkNetnsName(p.netns);
  checkIfName(p.vethHost);
  checkIfName(p.bridge);
  if (!isIPv4(p.ip)) throw new Error(`pod IP is not an IPv4 address: ${p.ip}`);
  if (!isIPv4(p.gateway)) throw new Error(`pod gateway is not an IPv4 address: ${p.gateway}`);
  if (!Number.isInteger(p.prefixLength) || p.prefixLength < 1 || p.prefixLength > 32) {
    throw new Error(`pod prefix length must be 1..32, got ${p.prefixLength}`);
  }
  await deletePodNetwork(p.netns, p.vethHost);
  try {
    await ip(["netns", "add", p.netns]);
    // Creating the peer directly inside the netns avoids a temporary host-side name and a rename.
    await ip(["link", "add", "name", p.vethHost, "type", "veth", "peer", "name", "eth0", "netns", p.netns]);
    await ip(["link", "set", "dev", p.vethHost, "master", p.bridge, "up"]);
    await ip(["-n", p.netns, "addr", "add", `${p.ip}/${p.prefixLength}`, "dev", "eth0"]);
    await ip(["-n", p.netns, "link", "set", "dev", "eth0", "up"]);
    await ip(["-n", p.netns, "link", "set", "dev", "lo", "up"]);
    await ip(["-n", p.netns, "route", "add", "default", "via", p.gateway, "dev", "eth0"]);
    // A pod IP may have belonged to a deleted pod moments ago: the host's neighbour cache would
    // still send its packets to the old MAC until the stale entry times out (~10 s of hung
    // connects). Forget it, so the first packet asks ARP afresh.
    await ip(["neigh", "flush", "to", p.ip, "dev", p.bridge]).catch(() => undefined);
  } catch (error) {
    await deletePodNetwork(p.netns, p.vethHost).catch(() => undefined);
    throw error;
  }
}

/**
 * SIGKILLs every process still in the netns, then deletes the host veth (which takes eth0 with it) and
 * the netns. Either may already be gone.
 */
export async function deletePodNetwork(netns: string, vethHost: string): Promise<void> {
  checkNetnsName(netns);
  checkIfName(vethHost);
  if (netnsExists(netns)) await killNetnsProcesses(netns);
  if ((await linkKind(vethHost)) !== undefined) await ip(["link", "del", "dev", vethHost]);
  if (netnsExists(netns)) await ip(["netns", "del", netns]);
}

/** Names of the existing network namespaces that start with `prefix` (for cleanup after a crash). */
export async function listNetns(prefix: string): Promise<string[]> {
  try {
    const names = await readdir(NETNS_DIR);
    return names.filter((name) => name.startsWith(prefix)).sort();
  } catch (error) {
    if (errorCode(error) === "ENOENT") return [];
    throw new Error(`cannot list ${NETNS_DIR}`, { cause: error });
  }
}

function netnsExists(netns: string): boolean {
  return existsSync(`${NETNS_DIR}/${netns}`);
}

/** Kills until `ip netns pids` is empty: a process may fork while we kill, so one pass is not enough. */
async function killNetnsProcesses(netns: string): Promise<void> {
  const deadline = Date.now() + KILL_WAIT_MS;
  for (;;) {
    const { stdout } = await ip(["netns", "pids", netns]);
    const pids = stdout.split(/\s+/).filter(Boolean).map(Number);
    if (pids.length === 0) return;
    if (Date.now() > deadline) {
      throw new Error(
        `processes ${pids.join(" ")} in netns ${netns} survived SIGKILL for ${KILL_WAIT_MS} ms`,
      );
    }
    for (const pid of pids) killIgnoringGone(pid, "SIGKILL");
    // Dead processes leave `ip netns pids` once their parent reaps them (zombies have no ns links).
    await sleep(50);
  }
}

// ---------------------------------------------------------------------------------------------------
// Containers

/**
 * Starts a container process: `ip netns exec NETNS unshare --mount --uts --propagation private --
 * /bin/sh container-init.sh ... -- COMMAND...`. Each step execs in place, so the returned child's pid is
 * the container's own process, and it leads its own process group (see signalContainer).
 *
 * The environment is exactly `env`. Names must be shell identifiers other than PWD, IFS, PPID and
 * OPTIND: the init script runs under dash, which drops other names and rewrites those four.
 *
 * Throws on invalid input or a missing netns; attach an "error" listener to the child for spawn
 * failures. Init failures exit with INIT_FAILURE_EXIT_CODE and explain themselves in the log.
 */
export function spawnContainer(c: ContainerSpec): ChildProcess {
  checkContainerSpec(c);
  if (!netnsExists(c.netns)) throw new Error(`netns ${c.netns} does not exist`);
  const initArgs = [
    c.hostname,
    c.workingDir ?? "",
    String(c.mounts.length),
    ...c.mounts.flatMap((m) => [m.source, m.target, m.readOnly ? "ro" : "rw"]),
    "--",
    ...c.command,
  ];
  const args = [
    "netns",
    "exec",
    c.netns,
    tool("unshare"),
    "--mount",
    "--uts",
    "--propagation",
    "private",
    "--",
    "/bin/sh",
    INIT_SCRIPT,
    ...initArgs,
  ];
  const log = openLog(c.logFile);
  try {
    // detached: setsid(), so the container leads a process group that kill(-pid) reaches as a whole.
    return spawn(tool("ip"), args, { detached: true, env: { ...c.env }, stdio: ["ignore", log, log] });
  } finally {
    // The child has its own copy of the descriptor.
    closeSync(log);
  }
}

/**
 * Runs `command` in the net, mount and UTS namespaces and the working directory of container process
 * `pid`, with that process's initial environment (as an exec probe or `kubectl exec` would see it).
 * Output is capped at 64 KiB per stream. Throws when the container process is gone.
 */
export async function execInContainer(
  pid: number,
  command: string[],
  timeoutMs: number,
): Promise<ExecResult> {
  checkPid(pid);
  if (command.length === 0) throw new Error("exec needs a command");
  const env = await processEnvironment(pid);
  const args = ["--target", String(pid), "--net", "--mount", "--uts", "--wd", "--", ...command];
  const child = spawn(tool("nsenter"), args, { detached: true, env, stdio: ["ignore", "pipe", "pipe"] });
  return collectExec(child, timeoutMs);
}

/** Sends `signal` to the container's whole process group; a group that is already gone is fine. */
export function signalContainer(pid: number, signal: NodeJS.Signals | number): void {
  checkPid(pid);
  killIgnoringGone(-pid, signal);
}

/** True while `pid` exists and is not a zombie (an exited child its parent has not reaped yet). */
export function isAlive(pid: number): boolean {
  checkPid(pid);
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM still means it exists; as root we should not see it, but it is not "dead".
    return errorCode(error) === "EPERM";
  }
  return processState(pid) !== "Z";
}

function collectExec(child: ChildProcess, timeoutMs: number): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const stdout = capture(child.stdout);
    const stderr = capture(child.stderr);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      // The whole group: a shell's children would otherwise hold the pipes open.
      if (child.pid !== undefined) killIgnoringGone(-child.pid, "SIGKILL");
    }, timeoutMs);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`nsenter ${child.spawnargs.slice(1).join(" ")} failed to start`, { cause: error }));
    });
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ exitCode: code ?? 128 + signalNumber(signal), stdout: stdout(), stderr: stderr(), timedOut });
    });
  });
}

/** Collects a stream up to EXEC_OUTPUT_LIMIT bytes, draining (and dropping) the rest. */
function capture(stream: NodeJS.ReadableStream | null): () => string {
  const chunks: Buffer[] = [];
  let size = 0;
  stream?.on("data", (chunk: Buffer) => {
    if (size >= EXEC_OUTPUT_LIMIT) return;
    const kept = chunk.subarray(0, EXEC_OUTPUT_LIMIT - size);
    chunks.push(kept);
    size += kept.length;
  });
  return () => Buffer.concat(chunks).toString("utf8");
}

async function processEnvironment(pid: number): Promise<Record<string, string>> {
  let raw: string;
  try {
    raw = await readFile(`/proc/${pid}/environ`, "utf8");
  } catch (error) {
    throw new Error(`container process ${pid} is not running (cannot read /proc/${pid}/environ)`, {
      cause: error,
    });
  }
  const env: Record<string, string> = {};
  for (const entry of raw.split("\0")) {
    const eq = entry.indexOf("=");
    if (eq > 0) env[entry.slice(0, eq)] = entry.slice(eq + 1);
  }
  return env;
}

/** The state letter from /proc/PID/stat (after the parenthesised command, which may contain spaces). */
function processState(pid: number): string | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  const end = stat.lastIndexOf(")");
  return stat.charAt(end + 2) || undefined;
}

// ---------------------------------------------------------------------------------------------------
// Validation: fail early with a clear message instead of a confusing ip/mount error later.

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const DASH_OWNED_ENV = new Set(["PWD", "IFS", "PPID", "OPTIND"]);

function checkContainerSpec(c: ContainerSpec): void {
  checkNetnsName(c.netns);
  if (c.command.length === 0) throw new Error("container command is empty");
  if (Buffer.byteLength(c.hostname) > 64) throw new Error(`hostname is longer than 64 bytes: ${c.hostname}`);
  if (c.workingDir !== undefined && !c.workingDir.startsWith("/")) {
    throw new Error(`workingDir must be absolute: ${c.workingDir}`);
  }
  for (const m of c.mounts) {
    // There is no chroot: a relative path would resolve against whatever the init's cwd happens to be.
    if (!m.source.startsWith("/") || !m.target.startsWith("/")) {
      throw new Error(`mount source and target must be absolute: ${m.source} -> ${m.target}`);
    }
  }
  for (const name of Object.keys(c.env)) {
    if (!ENV_NAME.test(name)) throw new Error(`environment variable name is not a shell identifier: ${name}`);
    if (DASH_OWNED_ENV.has(name))
      throw new Error(`environment variable ${name} cannot be set for a container`);
  }
}

/** Kernel limit: IFNAMSIZ - 1 bytes, and no "/" or whitespace. */
function checkIfName(name: string): void {
  if (!/^[A-Za-z0-9_.-]{1,15}$/.test(name) || name === "." || name === "..") {
    throw new Error(`invalid interface name (1-15 of [A-Za-z0-9_.-]): ${name}`);
  }
}

/** ip(8) treats a netns "name" containing "/" as a path, so keep it to a plain file name. */
function checkNetnsName(name: string): void {
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name) || name === "." || name === "..") {
    throw new Error(`invalid netns name (1-64 of [A-Za-z0-9_.-]): ${name}`);
  }
}

function checkPid(pid: number): void {
  if (!Number.isInteger(pid) || pid <= 1) throw new Error(`invalid container pid: ${pid}`);
}

function cidrPrefixLength(cidr: string): number {
  const match = /^(\d+\.\d+\.\d+\.\d+)\/(\d{1,2})$/.exec(cidr);
  const prefix = Number(match?.[2]);
  if (!match?.[1] || !isIPv4(match[1]) || prefix < 1 || prefix > 32) {
    throw new Error(`not an IPv4 CIDR: ${cidr}`);
  }
  return prefix;
}

// ---------------------------------------------------------------------------------------------------
// Plumbing

/**
 * The link's kind ("bridge", "veth", "" for a plain device), or undefined when no such link exists.
 * ip's JSON output is used so the check does not depend on message wording for the common case.
 */
async function linkKind(name: string): Promise<string | undefined> {
  const result = await runCommand("ip", ["-j", "-d", "link", "show", "dev", name]);
  if (result.code !== 0) {
    if (/does not exist/.test(result.stderr)) return undefined;
    throw commandError("ip", ["-j", "-d", "link", "show", "dev", name], result);
  }
  const parsed: unknown = JSON.parse(result.stdout);
  const first: unknown = Array.isArray(parsed) ? parsed[0] : undefined;
  if (!isRecord(first)) return undefined;
  const info = first.linkinfo;
  return isRecord(info) && typeof info.info_kind === "string" ? info.info_kind : "";
}

async function ip(args: string[]): Promise<{ stdout: string; stderr: string }> {
  const result = await runCommand("ip", args);
  if (result.code !== 0) throw commandError("ip", args, result);
  return result;
}

interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
  error?: Error;
}

/** Runs a tool to completion; never throws for a non-zero exit (the caller decides what that means). */
function runCommand(name: string, args: string[]): Promise<CommandResult> {
  return new Promise((resolve) => {
    execFile(tool(name), args, { encoding: "utf8", timeout: COMMAND_TIMEOUT_MS }, (error, stdout, stderr) => {
      if (!error) {
        resolve({ code: 0, stdout, stderr });
        return;
      }
      const code = typeof error.code === "number" ? error.code : -1;
      resolve({ code, stdout, stderr, error });
    });
  });
}

function commandError(name: string, args: string[], result: CommandResult): Error {
  const detail = result.stderr.trim() || result.error?.message || `exit code ${result.code}`;
  return new Error(`${name} ${args.join(" ")} failed: ${detail}`, { cause: result.error });
}

const toolPaths = new Map<string, string>();

/**
 * Absolute path of a system tool. Resolved here rather than through PATH because containers are
 * spawned with the container's environment, which need not have a PATH at all.
 */
function tool(name: string): string {
  const cached = toolPaths.get(name);
  if (cached !== undefined) return cached;
  for (const dir of ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]) {
    const path = `${dir}/${name}`;
    try {
      accessSync(path, fsConstants.X_OK);
      toolPaths.set(name, path);
      return path;
    } catch {
      // try the next directory
    }
  }
  throw new Error(`${name} not found in /usr/sbin, /usr/bin, /sbin or /bin (install iproute2 / util-linux)`);
}

function openLog(path: string): number {
  try {
    return openSync(path, "a");
  } catch (error) {
    throw new Error(`cannot open container log ${path}`, { cause: error });
  }
}

function killIgnoringGone(pid: number, signal: NodeJS.Signals | number): void {
  try {
    process.kill(pid, signal);
  } catch (error) {
    if (errorCode(error) !== "ESRCH") throw new Error(`kill(${pid}, ${signal}) failed`, { cause: error });
  }
}

function signalNumber(signal: NodeJS.Signals | null): number {
  return signal === null ? 0 : (osConstants.signals[signal] ?? 0);
}

function errorCode(error: unknown): string | undefined {
  return isRecord(error) && typeof error.code === "string" ? error.code : undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

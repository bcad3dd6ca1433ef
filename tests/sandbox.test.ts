// The process kubelet's Linux primitives against the real kernel: a bridge, two pod network
// namespaces, and containers with bind mounts, hostname, env, working directory and logs. Needs root.
// Uses bridge eopt0, subnet 10.77.0.0/24 and netns names starting with "eopt-"; everything is removed
// in teardown, and leftovers of a crashed earlier run are removed before starting.
import { type ChildProcess, execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import t from "tap";
import {
  type ContainerSpec,
  createPodNetwork,
  deleteBridge,
  deletePodNetwork,
  ensureBridge,
  execInContainer,
  isAlive,
  listNetns,
  signalContainer,
  spawnContainer,
} from "../infra/local/kubelet/sandbox.ts";

const NET = { bridge: "eopt0", cidr: "10.77.0.0/24", gateway: "10.77.0.1" };
const PREFIX = "eopt-";
const TMP_PREFIX = "eopt-sandbox-";
const POD_A = { netns: "eopt-a", vethHost: "eopt-va", ip: "10.77.0.10" };
const POD_B = { netns: "eopt-b", vethHost: "eopt-vb", ip: "10.77.0.11" };
const POD_C = { netns: "eopt-c", vethHost: "eopt-vc", ip: "10.77.0.12" };
const PODS = [POD_A, POD_B, POD_C];
const NODE = process.execPath;
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

interface Running {
  child: ChildProcess;
  pid: number;
  exited: Promise<Exit>;
  log: string;
}

const children: ChildProcess[] = [];

async function cleanup(): Promise<void> {
  for (const child of children) {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      signalContainer(child.pid, "SIGKILL");
    }
  }
  for (const pod of PODS) await deletePodNetwork(pod.netns, pod.vethHost);
  // Anything else of ours (a netns from a crashed run with a veth name we do not know).
  for (const netns of await listNetns(PREFIX)) await deletePodNetwork(netns, "eopt-unknown");
  await deleteBridge(NET.bridge);
}

function podNetwork(pod: { netns: string; vethHost: string; ip: string }) {
  return { ...pod, prefixLength: 24, gateway: NET.gateway, bridge: NET.bridge };
}

/** Starts a container and records its exit straight away, so a fast exit is not missed. */
function start(spec: ContainerSpec): Running {
  const child = spawnContainer(spec);
  children.push(child);
  const exited = new Promise<Exit>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code, signal) => resolve({ code, signal }));
  });
  if (child.pid === undefined) throw new Error("spawnContainer returned a child without a pid");
  return { child, pid: child.pid, exited, log: spec.logFile };
}

function readLog(path: string): string {
  return existsSync(path) ? readFileSync(path, "utf8") : "";
}

/** Polls until `check` returns a value (not undefined), or fails after `timeoutMs`. */
async function waitFor<T>(what: string, check: () => T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The JSON lines a container printed (other lines are skipped). */
function jsonLines(path: string): unknown[] {
  return readLog(path)
    .split("\n")
    .filter((line) => line.startsWith("{") || line.startsWith("["))
    .map((line) => JSON.parse(line));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * tap's process tracking (@tapjs/processinfo) hooks child_process in this test process and adds its own
 * NODE_OPTIONS and _TAPJS_PROCESSINFO_* variables to every spawn's env. Only those exact additions are
 * removed; anything else extra (PATH, HOME, PWD from this process or the init shell) still fails.
 */
function withoutHarnessEnv(env: unknown): unknown {
  if (!isRecord(env)) return env;
  const rest = Object.entries(env).filter(
    ([name, value]) =>
      !name.startsWith("_TAPJS_PROCESSINFO_") &&
      !(name === "NODE_OPTIONS" && typeof value === "string" && value.includes("@tapjs/processinfo")),
  );
  return Object.fromEntries(rest);
}

function linkExists(name: string): boolean {
  try {
    execFileSync("ip", ["link", "show", "dev", name], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

// A small HTTP server answering with the pod's hostname, and a client printing what it got.
const SERVER_JS = `
const http = require("node:http");
const os = require("node:os");
http.createServer((req, res) => res.end("hello from " + os.hostname()))
  .listen(8080, "0.0.0.0", () => console.log("listening"));
`;
const CLIENT_JS = `
fetch(process.argv[2]).then((r) => r.text()).then((body) => { console.log("got: " + body); })
  .catch((e) => { console.error("fetch failed: " + e.message); process.exitCode = 1; });
`;
// Reports what the container sees, then reports /etc/hosts again whenever it changes.
const PROBE_JS = `
const fs = require("node:fs");
const os = require("node:os");
const [dataDir, configFile, roDir, weirdDir] = process.argv.slice(2);
let roWrite = "allowed";
try { fs.writeFileSync(roDir + "/new-file", "x"); } catch (e) { roWrite = e.code; }
const mountinfo = fs.readFileSync("/proc/self/mountinfo", "utf8");
let hosts = fs.readFileSync("/etc/hosts", "utf8");
console.log(JSON.stringify({
  hostname: os.hostname(),
  env: process.env,
  cwd: process.cwd(),
  cwdEntries: fs.readdirSync(".").sort(),
  data: fs.readFileSync(dataDir + "/hello.txt", "utf8"),
  config: fs.readFileSync(configFile, "utf8"),
  roContent: fs.readFileSync(roDir + "/existing", "utf8"),
  roWrite,
  weird: fs.readFileSync(weirdDir + "/inside", "utf8"),
  mounted: [dataDir, configFile, roDir, weirdDir, "/etc/hosts"].map((p) => mountinfo.includes(" " + p.replace(/ /g, "\\\\040") + " ")),
}));
setInterval(() => {
  const now = fs.readFileSync("/etc/hosts", "utf8");
  if (now !== hosts) { hosts = now; console.log(JSON.stringify({ hosts })); }
}, 50);
console.log(JSON.stringify({ hosts }));
`;
const ARGV_JS = "process.stdout.write(JSON.stringify(process.argv.slice(2)) + '\\n');";

const skip = process.getuid?.() === 0 ? false : "the sandbox needs root (network and mount namespaces)";

t.test("sandbox", { skip }, async (t) => {
  // A crashed earlier run: its processes die with its netns, then its scratch directory can go.
  await cleanup();
  for (const name of readdirSync("/tmp")) {
    if (name.startsWith(TMP_PREFIX)) rmSync(join("/tmp", name), { recursive: true, force: true });
  }
  const tmp = mkdtempSync(join("/tmp", TMP_PREFIX));
  t.teardown(async () => {
    await cleanup();
    rmSync(tmp, { recursive: true, force: true });
  });

  await ensureBridge(NET);
  await ensureBridge(NET); // idempotent
  await createPodNetwork(podNetwork(POD_A));
  await createPodNetwork(podNetwork(POD_B));
  const scripts = { server: join(tmp, "server.cjs"), client: join(tmp, "client.cjs") };
  writeFileSync(scripts.server, SERVER_JS);
  writeFileSync(scripts.client, CLIENT_JS);
  writeFileSync(join(tmp, "probe.cjs"), PROBE_JS);
  writeFileSync(join(tmp, "argv.cjs"), ARGV_JS);

  const server = start({
    netns: POD_A.netns,
    hostname: "pod-a",
    mounts: [],
    env: { PATH },
    command: [NODE, scripts.server],
    logFile: join(tmp, "server.log"),
  });
  await waitFor("the server in pod A", () => (readLog(server.log).includes("listening") ? true : undefined));

  await t.test("pods get their IPs and reach each other and the host over the bridge", async (t) => {
    t.same(await listNetns(PREFIX), ["eopt-a", "eopt-b"]);
    const addrA = await execInContainer(
      server.pid,
      ["ip", "-br", "-4", "addr", "show", "dev", "eth0"],
      5_000,
    );
    t.equal(addrA.exitCode, 0, addrA.stderr);
    t.match(addrA.stdout, /10\.77\.0\.10\/24/);
    const route = await execInContainer(server.pid, ["ip", "route", "show", "default"], 5_000);
    t.match(route.stdout, /default via 10\.77\.0\.1 dev eth0/);

    const fromHost = await fetch(`http://${POD_A.ip}:8080/`);
    t.equal(await fromHost.text(), "hello from pod-a", "host -> pod A through the bridge");

    const client = start({
      netns: POD_B.netns,
      hostname: "pod-b",
      mounts: [],
      env: {},
      command: [NODE, scripts.client, `http://${POD_A.ip}:8080/`],
      logFile: join(tmp, "client.log"),
    });
    t.same(await client.exited, { code: 0, signal: null }, readLog(client.log));
    t.match(readLog(client.log), "got: hello from pod-a", "pod B -> pod A by IP");
  });

  await t.test("mounts, hostname, env and working directory", async (t) => {
    const vol = join(tmp, "vol");
    const ctr = join(tmp, "ctr");
    mkdirSync(join(vol, "data"), { recursive: true });
    mkdirSync(join(vol, "ro"), { recursive: true });
    const weirdSource = join(vol, "we ird $(touch pwned-src); 'q' \"dq\"");
    mkdirSync(weirdSource);
    writeFileSync(join(vol, "data", "hello.txt"), "hello from a volume");
    writeFileSync(join(vol, "config.txt"), "config v1");
    writeFileSync(join(vol, "ro", "existing"), "read me");
    writeFileSync(join(weirdSource, "inside"), "weird ok");
    const hostsFile = join(tmp, "etc-hosts");
    writeFileSync(hostsFile, "127.0.0.1 localhost\n10.77.0.20 pod-m\n");
    const hostHosts = readFileSync("/etc/hosts", "utf8");
    const hostMountsBefore = readFileSync("/proc/self/mountinfo", "utf8");

    const targets = {
      data: join(ctr, "data"), // missing: created as a directory
      config: join(ctr, "etc", "config.txt"), // missing, parent too: created as an empty file
      ro: join(ctr, "ro"),
      weird: join(ctr, "sp ace $(touch pwned-tgt)"),
    };
    const env = {
      GREETING: "hi",
      lower_case: "1",
      EMPTY: "",
      TRICKY: "a b $(touch pwned-env) ; `x` 'q' \"dq\"\nsecond line",
      OLDPWD: "/kept/as/given",
    };
    const probe = start({
      netns: POD_B.netns,
      hostname: "pod-m",
      mounts: [
        { source: join(vol, "data"), target: targets.data },
        { source: join(vol, "config.txt"), target: targets.config },
        { source: join(vol, "ro"), target: targets.ro, readOnly: true },
        { source: weirdSource, target: targets.weird },
        { source: hostsFile, target: "/etc/hosts" },
      ],
      workingDir: targets.data,
      env,
      command: [NODE, join(tmp, "probe.cjs"), targets.data, targets.config, targets.ro, targets.weird],
      logFile: join(tmp, "probe.log"),
    });
    const report = await waitFor("the probe's report", () => jsonLines(probe.log).find(isRecord));
    t.equal(report.hostname, "pod-m");
    t.same(withoutHarnessEnv(report.env), env, "exactly the given environment, nothing inherited or added");
    t.equal(report.cwd, targets.data);
    t.same(report.cwdEntries, ["hello.txt"], "cwd is entered after the mounts");
    t.equal(report.data, "hello from a volume");
    t.equal(report.config, "config v1");
    t.equal(report.roContent, "read me");
    t.equal(report.roWrite, "EROFS");
    t.equal(report.weird, "weird ok");
    t.same(report.mounted, [true, true, true, true, true], "the container's mount table has all of them");

    t.ok(statSync(targets.data).isDirectory(), "directory mountpoint created on the host");
    t.ok(statSync(targets.config).isFile(), "file mountpoint created on the host");
    t.equal(readFileSync(targets.config, "utf8"), "", "the host sees the empty mountpoint, not the volume");
    t.equal(readFileSync("/etc/hosts", "utf8"), hostHosts, "the host's /etc/hosts is untouched");
    const hostMounts = readFileSync("/proc/self/mountinfo", "utf8");
    t.notMatch(hostMounts, tmp, "no container mount shows in the host's mount table");
    t.equal(hostMounts, hostMountsBefore);
    // Were a path or value ever run as shell code, the touch would land in one of these directories.
    const markers = ["pwned-src", "pwned-tgt", "pwned-env"].flatMap((name) =>
      [process.cwd(), tmp, vol, ctr, targets.data, "/"].map((dir) => join(dir, name)),
    );
    t.same(markers.filter(existsSync), [], "no path or value was run as shell code");

    const firstHosts = await waitFor("the first hosts report", () =>
      jsonLines(probe.log).find((line) => isRecord(line) && "hosts" in line && !("env" in line)),
    );
    t.same(firstHosts, { hosts: "127.0.0.1 localhost\n10.77.0.20 pod-m\n" });
    const inodeBefore = statSync(hostsFile).ino;
    writeFileSync(hostsFile, "127.0.0.1 localhost\n10.77.0.20 pod-m\n10.77.0.21 pod-n\n"); // truncate + write
    t.equal(statSync(hostsFile).ino, inodeBefore);
    const updated = await waitFor("the rewritten hosts file inside", () =>
      jsonLines(probe.log).find(
        (line) => isRecord(line) && typeof line.hosts === "string" && line.hosts.includes("pod-n"),
      ),
    );
    t.ok(updated, "an in-place rewrite of the source is seen inside");
    const viaExec = await execInContainer(probe.pid, ["cat", "/etc/hosts"], 5_000);
    t.match(viaExec.stdout, "pod-n", "exec sees the container's mounts");
    t.equal(viaExec.stdout, readFileSync(hostsFile, "utf8"));
    const cwd = await execInContainer(probe.pid, ["/bin/sh", "-c", "pwd; ls"], 5_000);
    t.equal(cwd.stdout, `${targets.data}\nhello.txt\n`, "exec starts in the container's working directory");

    signalContainer(probe.pid, "SIGTERM");
    t.same(await probe.exited, { code: null, signal: "SIGTERM" });
  });

  await t.test("the spawned pid is the command; logs append; exit codes", async (t) => {
    const log = join(tmp, "exit.log");
    writeFileSync(log, "earlier line\n");
    const c = start({
      netns: POD_A.netns,
      hostname: "pod-a",
      mounts: [],
      env: { PATH },
      command: ["/bin/sh", "-c", 'echo "pid $$"; echo to-stdout; echo to-stderr >&2; exit 3'],
      logFile: log,
    });
    t.same(await c.exited, { code: 3, signal: null });
    const text = readLog(log);
    t.match(text, /^earlier line\n/, "appended, not truncated");
    t.match(text, `pid ${c.pid}\n`, "exec chain: the pid kubelet holds is the container's process");
    t.match(text, "to-stdout\n");
    t.match(text, "to-stderr\n");

    const missing = start({
      netns: POD_A.netns,
      hostname: "",
      mounts: [],
      env: {},
      command: ["/no/such/binary"],
      logFile: join(tmp, "missing.log"),
    });
    t.equal((await missing.exited).code, 127, "exec failure reports 127 like a shell");

    const badMount = start({
      netns: POD_A.netns,
      hostname: "",
      mounts: [{ source: join(tmp, "no-such-source"), target: join(tmp, "never") }],
      env: {},
      command: ["/bin/true"],
      logFile: join(tmp, "bad-mount.log"),
    });
    t.equal((await badMount.exited).code, 125);
    t.match(readLog(badMount.log), "container-init: mount source does not exist");
  });

  await t.test("SIGTERM to the process group ends the container and its children", async (t) => {
    const c = start({
      netns: POD_A.netns,
      hostname: "pod-a",
      mounts: [],
      env: { PATH },
      command: ["/bin/sh", "-c", 'sleep 300 & echo "child $!"; sleep 300 & echo "child $!"; wait'],
      logFile: join(tmp, "group.log"),
    });
    const pids = await waitFor("two children", () => {
      const found = [...readLog(c.log).matchAll(/child (\d+)/g)].map((m) => Number(m[1]));
      return found.length === 2 ? found : undefined;
    });
    t.ok(pids.every(isAlive) && isAlive(c.pid));
    signalContainer(c.pid, "SIGTERM");
    t.same(await c.exited, { code: null, signal: "SIGTERM" });
    await waitFor("the children to end", () => (pids.some(isAlive) ? undefined : true), 5_000);
    t.notOk(isAlive(c.pid));
    signalContainer(c.pid, "SIGTERM"); // gone already: no error
  });

  await t.test("execInContainer: network, hostname, cwd, exit codes, timeout", async (t) => {
    const hostname = await execInContainer(server.pid, ["hostname"], 5_000);
    t.same(hostname, { exitCode: 0, stdout: "pod-a\n", stderr: "", timedOut: false });
    const code = await execInContainer(server.pid, ["/bin/sh", "-c", "echo oops >&2; exit 7"], 5_000);
    t.same(code, { exitCode: 7, stdout: "", stderr: "oops\n", timedOut: false });
    const missing = await execInContainer(server.pid, ["/no/such/binary"], 5_000);
    t.not(missing.exitCode, 0);
    const started = Date.now();
    const slow = await execInContainer(server.pid, ["/bin/sh", "-c", "sleep 30 & sleep 30"], 300);
    t.ok(slow.timedOut);
    t.equal(slow.exitCode, 128 + 9, "killed with SIGKILL");
    t.ok(Date.now() - started < 5_000, "the timeout is enforced on the whole group");
    await t.rejects(execInContainer(999_999_999, ["true"], 1_000), /not running/);
  });

  await t.test("arguments are passed through literally", async (t) => {
    const marker = join(tmp, "pwned");
    const args = [
      `$(touch ${marker})`,
      `; touch ${marker}`,
      `\`touch ${marker}\``,
      `'single' "double" \\ back`,
      "line one\nline two",
      "--",
      "",
      "*",
      "$HOME",
      "-rf",
      "a=b",
    ];
    const c = start({
      netns: POD_A.netns,
      hostname: "pod-a",
      mounts: [],
      env: { PATH },
      command: [NODE, join(tmp, "argv.cjs"), ...args],
      logFile: join(tmp, "argv.log"),
    });
    t.same(await c.exited, { code: 0, signal: null }, readLog(c.log));
    t.same(jsonLines(c.log), [args]);
    t.notOk(existsSync(marker), "no argument was run as shell code");

    const exec = await execInContainer(server.pid, [NODE, join(tmp, "argv.cjs"), ...args], 5_000);
    t.same(JSON.parse(exec.stdout), args);
    t.notOk(existsSync(marker));
  });

  await t.test("invalid container specs are refused before anything runs", async (t) => {
    const base: ContainerSpec = {
      netns: POD_A.netns,
      hostname: "",
      mounts: [],
      env: {},
      command: ["/bin/true"],
      logFile: join(tmp, "refused.log"),
    };
    t.throws(() => spawnContainer({ ...base, env: { "my-var": "x" } }), /not a shell identifier/);
    t.throws(() => spawnContainer({ ...base, env: { PWD: "/" } }), /cannot be set/);
    t.throws(() => spawnContainer({ ...base, netns: "eopt-nope" }), /does not exist/);
    t.throws(() => spawnContainer({ ...base, netns: "../etc" }), /invalid netns name/);
    t.throws(() => spawnContainer({ ...base, workingDir: "relative" }), /must be absolute/);
    t.throws(() => spawnContainer({ ...base, command: [] }), /empty/);
  });

  await t.test("deletePodNetwork kills leftovers; createPodNetwork heals a crashed pod", async (t) => {
    await createPodNetwork(podNetwork(POD_C));
    const spawnSleeper = (name: string) =>
      start({
        netns: POD_C.netns,
        hostname: "pod-c",
        mounts: [],
        env: { PATH },
        // The setsid'd grandchild escapes the process group: only the netns still finds it.
        command: ["/bin/sh", "-c", 'setsid sleep 300 & echo "escaped $!"; exec sleep 301'],
        logFile: join(tmp, `${name}.log`),
      });
    const escapedPid = async (c: Running) =>
      waitFor("the escaped grandchild", () => {
        const match = /escaped (\d+)/.exec(readLog(c.log));
        return match ? Number(match[1]) : undefined;
      });

    // A second create over a live netns (as after a kubelet crash) starts from scratch.
    const first = spawnSleeper("crashed");
    const firstEscaped = await escapedPid(first);
    await createPodNetwork(podNetwork(POD_C));
    t.same(await first.exited, { code: null, signal: "SIGKILL" });
    await waitFor("the first escaped grandchild to die", () => (isAlive(firstEscaped) ? undefined : true));
    const addr = execFileSync("ip", ["-n", POD_C.netns, "-br", "-4", "addr", "show", "dev", "eth0"], {
      encoding: "utf8",
    });
    t.match(addr, "10.77.0.12/24", "recreated with its address");

    const second = spawnSleeper("leftover");
    const secondEscaped = await escapedPid(second);
    t.same(await listNetns(PREFIX), ["eopt-a", "eopt-b", "eopt-c"]);
    t.same(await listNetns("eopt-c"), ["eopt-c"]);
    t.same(await listNetns("nothing-like-this-"), []);
    t.ok(linkExists(POD_C.vethHost));
    await deletePodNetwork(POD_C.netns, POD_C.vethHost);
    t.same(await second.exited, { code: null, signal: "SIGKILL" });
    t.notOk(isAlive(secondEscaped), "a process outside the container's group is killed too");
    t.same(await listNetns(PREFIX), ["eopt-a", "eopt-b"]);
    t.notOk(linkExists(POD_C.vethHost), "host veth removed");
    await deletePodNetwork(POD_C.netns, POD_C.vethHost); // already gone: no error
  });

  signalContainer(server.pid, "SIGTERM");
  t.same(await server.exited, { code: null, signal: "SIGTERM" });
});

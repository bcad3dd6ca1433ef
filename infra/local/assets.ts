// Builds the local control plane's binaries (kube-apiserver, kube-controller-manager, kubectl,
// etcd/etcdctl/etcdutl for every supported etcd minor, versitygw for the S3 store that backups go
// to, and for real nodes kubelet, kube-proxy, kube-scheduler, pause and CoreDNS) and the tests' tools
// (fake-gcs-server, promtool) from their Go modules, so the project needs no release tarballs from
// the internet: only the Go module proxy.
//
// Everything lives in a cache outside git, keyed by version: changing a pinned version below builds the
// new set beside the old one. A set counts as built only once its stamp file exists, and it is built in a
// temporary directory renamed into place, so a killed build never leaves a half set behind.
//
// Run directly: `node infra/local/assets.ts` ensures everything and prints a JSON summary of the paths;
// `node infra/local/assets.ts --check` only reports what is missing (exit code 1 if anything is).
import { spawn } from "node:child_process";
import { createWriteStream, type WriteStream } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";

/** The Kubernetes release whose kube-apiserver, kube-controller-manager and kubectl we run. */
export const KUBERNETES_VERSION = "1.34.4";

/**
 * versitygw (the Versity S3 Gateway, Apache-2.0): its posix backend is the real S3-compatible store
 * of the local tests and the demo (infra/local/object-store.ts says why it replaced SeaweedFS).
 * Tagged releases are Go module versions.
 */
export const VERSITYGW_VERSION = "1.8.0";

/**
 * fake-gcs-server (BSD-2-Clause): a server that speaks Google Cloud Storage's JSON and upload APIs,
 * the GCS store of the local tests (real GCS cannot run here). Tagged releases are Go module versions.
 */
export const FAKE_GCS_VERSION = "1.56.1";

/**
 * promtool (Apache-2.0), Prometheus's rule checker and rule unit-test runner: the tests check the
 * shipped alerts (infra/alerts.ts) with it. This is the Prometheus release; its Go module is tagged
 * v0.(major*100+minor).patch (see promtoolModuleVersion).
 */
export const PROMTOOL_VERSION = "3.16.0";

/** CoreDNS as kubeadm v1.34 deploys it (cmd/kubeadm/app/constants: CoreDNSVersion). */
export const COREDNS_VERSION = "1.12.1";
/** The pause (sandbox) image kubelet v1.34 and kubeadm use (constants: PauseVersion). */
export const PAUSE_VERSION = "3.10.1";

import { ETCD_VERSIONS } from "../../shared/etcd-versions.ts";

export { ETCD_VERSIONS };

export interface EtcdBuild {
  version: string;
  /** "3.5" */
  minor: string;
  binDir: string;
  etcd: string;
  etcdctl: string;
  etcdutl: string;
}

export interface FakeGcsBuild {
  version: string;
  fakeGcsServer: string;
}

export interface PromtoolBuild {
  /** The Prometheus release, "3.16.0". */
  version: string;
  promtool: string;
}

export interface VersitygwBuild {
  /** "1.8.0" */
  version: string;
  versitygw: string;
}

/** What real nodes run: kubelet and kube-proxy, kube-scheduler (the process kubelet places its own pods), pause. */
export interface NodeBuild {
  kubelet: string;
  kubeProxy: string;
  kubeScheduler: string;
  /** Kubernetes's build/pause/linux/pause.c, compiled static: the sandbox image's only file. */
  pause: string;
  pauseVersion: string;
}

export interface CorednsBuild {
  version: string;
  coredns: string;
}

export interface Assets {
  kubernetesVersion: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubectl: string;
  etcd: EtcdBuild[];
  versitygw: VersitygwBuild;
  fakeGcs: FakeGcsBuild;
  promtool: PromtoolBuild;
  node: NodeBuild;
  coredns: CorednsBuild;
}

export type AssetKind = "kubernetes" | "etcd" | "versitygw" | "fake-gcs" | "promtool" | "node" | "coredns";

/** What running the operator locally needs (the demo): every kind but the tests' own tools (GCS server, promtool). */
export const RUNTIME_ASSETS: AssetKind[] = ["kubernetes", "etcd", "versitygw", "node", "coredns"];

export interface EnsureOptions {
  /** Progress lines; default writes them to stderr. */
  log?: (line: string) => void;
  /** Build only these kinds. Paths of the others are still returned (where they would be). */
  only?: AssetKind[];
}

/** Written last into a finished build directory; its presence is what "built" means. */
const STAMP = ".complete";
const PROGRESS_EVERY_MS = 30_000;
/** How much of Go's output a failure message quotes. */
const ERROR_TAIL_LINES = 30;

export function cacheRoot(): string {
  return process.env.EOP_CACHE ?? join(homedir(), ".cache/etcd-operator");
}

// ---------------------------------------------------------------------------------------------------------
// Layout: where each version's binaries live. Pure path arithmetic, so the warm path never spawns anything.

/** One buildable set of binaries. */
interface Target {
  kind: AssetKind;
  /** Directory name under bin/ and build/, e.g. "etcd-v3.6.16". */
  name: string;
  /** For humans: "kubernetes v1.34.4". */
  label: string;
  binaries: string[];
  build: (ctx: BuildContext) => Promise<void>;
}

interface BuildContext {
  /** The wrapper Go module's directory (kept, so a rebuild only re-tidies). */
  moduleDir: string;
  /** Temporary directory the binaries go to; renamed into place when everything checks out. */
  outDir: string;
  log: (line: string) => void;
  logFile: string;
  label: string;
}

function binDir(name: string): string {
  return join(cacheRoot(), "bin", name);
}

function kubernetesName(): string {
  return `kubernetes-v${KUBERNETES_VERSION}`;
}

function etcdName(version: string): string {
  return `etcd-v${version}`;
}

function versitygwName(): string {
  return `versitygw-v${VERSITYGW_VERSION}`;
}

function fakeGcsName(): string {
  return `fake-gcs-server-v${FAKE_GCS_VERSION}`;
}

function promtoolName(): string {
  return `promtool-v${PROMTOOL_VERSION}`;
}

function nodeName(): string {
  return `kubernetes-node-v${KUBERNETES_VERSION}`;
}

function corednsName(): string {
  return `coredns-v${COREDNS_VERSION}`;
}

function minorOf(version: string): string {
  return version.split(".").slice(0, 2).join(".");
}

function targets(): Target[] {
  const kubernetes: Target = {
    kind: "kubernetes",
    name: kubernetesName(),
    label: `kubernetes v${KUBERNETES_VERSION}`,
    binaries: ["kube-apiserver", "kube-controller-manager", "kubectl"],
    build: buildKubernetes,
  };
  const etcds = ETCD_VERSIONS.map(
    (version): Target => ({
      kind: "etcd",
      name: etcdName(version),
      label: `etcd v${version}`,
      binaries: ["etcd", "etcdctl", "etcdutl"],
      build: (ctx) => buildEtcd(ctx, version),
    }),
  );
  const versitygw: Target = {
    kind: "versitygw",
    name: versitygwName(),
    label: `versitygw v${VERSITYGW_VERSION}`,
    binaries: ["versitygw"],
    build: buildVersitygw,
  };
  const fakeGcs: Target = {
    kind: "fake-gcs",
    name: fakeGcsName(),
    label: `fake-gcs-server v${FAKE_GCS_VERSION}`,
    binaries: ["fake-gcs-server"],
    build: buildFakeGcs,
  };
  const promtool: Target = {
    kind: "promtool",
    name: promtoolName(),
    label: `promtool v${PROMTOOL_VERSION}`,
    binaries: ["promtool"],
    build: buildPromtool,
  };
  const node: Target = {
    kind: "node",
    name: nodeName(),
    label: `kubernetes node v${KUBERNETES_VERSION}`,
    binaries: [...NODE_COMMANDS, "pause"],
    build: buildNode,
  };
  const coredns: Target = {
    kind: "coredns",
    name: corednsName(),
    label: `coredns v${COREDNS_VERSION}`,
    binaries: ["coredns"],
    build: buildCoredns,
  };
  return [kubernetes, ...etcds, versitygw, fakeGcs, promtool, node, coredns];
}

function layout(): Assets {
  const k8s = binDir(kubernetesName());
  return {
    kubernetesVersion: KUBERNETES_VERSION,
    kubeApiserver: join(k8s, "kube-apiserver"),
    kubeControllerManager: join(k8s, "kube-controller-manager"),
    kubectl: join(k8s, "kubectl"),
    etcd: ETCD_VERSIONS.map((version) => {
      const dir = binDir(etcdName(version));
      return {
        version,
        minor: minorOf(version),
        binDir: dir,
        etcd: join(dir, "etcd"),
        etcdctl: join(dir, "etcdctl"),
        etcdutl: join(dir, "etcdutl"),
      };
    }),
    versitygw: {
      version: VERSITYGW_VERSION,
      versitygw: join(binDir(versitygwName()), "versitygw"),
    },
    fakeGcs: {
      version: FAKE_GCS_VERSION,
      fakeGcsServer: join(binDir(fakeGcsName()), "fake-gcs-server"),
    },
    promtool: { version: PROMTOOL_VERSION, promtool: join(binDir(promtoolName()), "promtool") },
    node: {
      kubelet: join(binDir(nodeName()), "kubelet"),
      kubeProxy: join(binDir(nodeName()), "kube-proxy"),
      kubeScheduler: join(binDir(nodeName()), "kube-scheduler"),
      pause: join(binDir(nodeName()), "pause"),
      pauseVersion: PAUSE_VERSION,
    },
    coredns: { version: COREDNS_VERSION, coredns: join(binDir(corednsName()), "coredns") },
  };
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

function isBuilt(target: Target): Promise<boolean> {
  return exists(join(binDir(target.name), STAMP));
}

// ---------------------------------------------------------------------------------------------------------
// Public API

/** Makes sure every pinned binary is built (building what is missing) and returns their paths. */
export async function ensureAssets(options: EnsureOptions = {}): Promise<Assets> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const wanted = targets().filter((t) => options.only === undefined || options.only.includes(t.kind));
  const missing = await missingTargets(wanted);
  if (missing.length === 0) {
    log(`assets: ${wanted.map((t) => t.label).join(", ")} ready in ${join(cacheRoot(), "bin")}`);
    return layout();
  }
  await requireGo();
  log(`assets: building ${missing.map((t) => t.label).join(", ")} (cache: ${cacheRoot()})`);
  // One at a time: each go build already uses every core, and two would only fight over them.
  for (const target of missing) await buildTarget(target, log);
  return layout();
}

/** The etcd build for a minor ("3.6"); throws when that minor is not one we build. */
export function etcdForMinor(assets: Assets, minor: string): EtcdBuild {
  const build = assets.etcd.find((e) => e.minor === minor);
  if (build === undefined) {
    const known = assets.etcd.map((e) => e.minor).join(", ");
    throw new Error(`no etcd ${minor} among the local assets (have ${known}); see ETCD_VERSIONS`);
  }
  return build;
}

/** The newest etcd we build. */
export function newestEtcd(assets: Assets): EtcdBuild {
  const sorted = [...assets.etcd].sort((a, b) => compareVersions(b.version, a.version));
  const newest = sorted[0];
  if (newest === undefined) throw new Error("no etcd among the local assets; see ETCD_VERSIONS");
  return newest;
}

function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const diff = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (diff !== 0) return diff;
  }
  return 0;
}

async function missingTargets(wanted: Target[]): Promise<Target[]> {
  const built = await Promise.all(wanted.map(isBuilt));
  return wanted.filter((_, i) => !built[i]);
}

// ---------------------------------------------------------------------------------------------------------
// Building one target: temp dir, build, verify, stamp, rename.

async function buildTarget(target: Target, log: (line: string) => void): Promise<void> {
  const finalDir = binDir(target.name);
  const moduleDir = join(cacheRoot(), "build", target.name);
  // Beside the final directory so the rename stays on one filesystem (and is atomic).
  const outDir = join(cacheRoot(), "bin", `.tmp-${target.name}-${process.pid}`);
  await mkdir(moduleDir, { recursive: true });
  await removeAbandonedTempDirs(target.name);
  await rm(outDir, { recursive: true, force: true });
  await mkdir(outDir, { recursive: true });

  const logFile = join(moduleDir, "build.log");
  await writeFile(logFile, "");
  const started = Date.now();
  log(`assets: building ${target.label}: ${target.binaries.join(", ")} (log: ${logFile})`);
  try {
    await target.build({ moduleDir, outDir, log, logFile, label: target.label });
    await writeFile(join(outDir, STAMP), `${new Date().toISOString()}\n`);
    await publish(outDir, finalDir);
  } finally {
    await rm(outDir, { recursive: true, force: true });
  }
  log(`assets: built ${target.label} in ${formatDuration(Date.now() - started)}`);
}

/** Moves a finished build into place; a concurrent builder that got there first wins. */
async function publish(outDir: string, finalDir: string): Promise<void> {
  // A directory without a stamp is debris (e.g. copied by hand); rename cannot replace a non-empty one.
  if (!(await exists(join(finalDir, STAMP)))) await rm(finalDir, { recursive: true, force: true });
  try {
    await rename(outDir, finalDir);
  } catch (error) {
    if (!(await exists(join(finalDir, STAMP)))) throw error;
  }
}

/** Temp dirs of builds whose process is gone (killed mid-build); a live builder's are left alone. */
async function removeAbandonedTempDirs(name: string): Promise<void> {
  const prefix = `.tmp-${name}-`;
  const entries = await readdir(join(cacheRoot(), "bin")).catch(() => []);
  for (const entry of entries) {
    if (!entry.startsWith(prefix)) continue;
    const pid = Number(entry.slice(prefix.length));
    if (Number.isInteger(pid) && pid !== process.pid && isAlive(pid)) continue;
    await rm(join(cacheRoot(), "bin", entry), { recursive: true, force: true });
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return error instanceof Error && "code" in error && error.code === "EPERM";
  }
}

// ---------------------------------------------------------------------------------------------------------
// Kubernetes: a wrapper module requiring k8s.io/kubernetes. Its go.mod points every k8s.io/* staging
// module at ./staging/..., which only works inside its own repository, so the wrapper must replace each of
// them with the matching published v0.X.Y version.

async function buildKubernetes(ctx: BuildContext): Promise<void> {
  const commands = ["kube-apiserver", "kube-controller-manager", "kubectl"];
  await buildKubernetesCommands(ctx, commands);
  await verifyVersion(
    ctx,
    join(ctx.outDir, "kube-apiserver"),
    ["--version"],
    `Kubernetes v${KUBERNETES_VERSION}`,
  );
  await verifyVersion(ctx, join(ctx.outDir, "kubectl"), ["version", "--client"], `v${KUBERNETES_VERSION}`);
}

const NODE_COMMANDS = ["kubelet", "kube-proxy", "kube-scheduler"];

/**
 * What a real node runs, in a target of its own so that a machine that never starts real nodes
 * never builds them; and the pause binary, compiled from the C source in the same module, as
 * Kubernetes's build/pause/Makefile does (static, so the image holds nothing else).
 */
async function buildNode(ctx: BuildContext): Promise<void> {
  const moduleRoot = await buildKubernetesCommands(ctx, NODE_COMMANDS);
  for (const command of NODE_COMMANDS) {
    await verifyVersion(ctx, join(ctx.outDir, command), ["--version"], `Kubernetes v${KUBERNETES_VERSION}`);
  }
  const source = join(moduleRoot, "build", "pause", "linux", "pause.c");
  const pause = join(ctx.outDir, "pause");
  const cc = await run(
    "gcc",
    ["-Os", "-Wall", "-Werror", "-static", `-DVERSION=v${PAUSE_VERSION}`, "-o", pause, source],
    {},
  ).catch((error: unknown) => {
    throw new Error("gcc is needed to compile the pause binary of real nodes (apt-get install gcc)", {
      cause: error,
    });
  });
  if (cc.code !== 0)
    throw new Error(`compiling ${source} failed:\n${lastLines(cc.output, ERROR_TAIL_LINES)}`);
  await verifyVersion(ctx, pause, ["-v"], `pause.c v${PAUSE_VERSION}`);
}

/**
 * Builds Kubernetes commands in the wrapper module (see above) with the release's version stamped
 * in; returns the downloaded k8s.io/kubernetes module's directory.
 */
async function buildKubernetesCommands(ctx: BuildContext, commands: string[]): Promise<string> {
  const module = `k8s.io/kubernetes@v${KUBERNETES_VERSION}`;
  const info = await downloadModule(ctx, module);
  const upstreamGoMod = await readFile(info.goMod, "utf8");
  const staging = stagingModules(upstreamGoMod);
  if (staging.length === 0) throw new Error(`found no staging modules in ${module}'s go.mod (${info.goMod})`);
  const stagingVersion = `v0.${KUBERNETES_VERSION.split(".").slice(1).join(".")}`;

  await writeFile(
    join(ctx.moduleDir, "go.mod"),
    [
      "module eop.local/kubernetes-assets",
      "",
      "go 1.24.0",
      "",
      // Kubernetes pins its runtime behaviour this way; the main module's godebug lines are what count.
      ...upstreamGoMod.split("\n").filter((line) => /^godebug [^(]/.test(line)),
      "",
      `require k8s.io/kubernetes v${KUBERNETES_VERSION}`,
      "",
      "replace (",
      ...staging.map((name) => `\t${name} => ${name} ${stagingVersion}`),
      ")",
      "",
    ].join("\n"),
  );
  await writeFile(
    join(ctx.moduleDir, "tools.go"),
    toolsGo(commands.map((c) => `k8s.io/kubernetes/cmd/${c}`)),
  );
  await runGo(ctx, "resolving modules (go mod tidy)", ["mod", "tidy"]);
  await runGo(ctx, `building ${commands.join(", ")}`, [
    "build",
    "-trimpath",
    "-buildvcs=false",
    "-ldflags",
    `-s -w ${kubernetesVersionFlags(info.time)}`,
    "-o",
    `${ctx.outDir}/`,
    ...commands.map((c) => `k8s.io/kubernetes/cmd/${c}`),
  ]);
  return info.dir;
}

/**
 * CoreDNS with the plugins kubeadm's Corefile uses and no others: CoreDNS's own way to make a
 * smaller build (a main that imports coremain and the chosen plugin packages), which leaves out
 * the cloud DNS plugins and their SDKs (a quarter of the download and build time).
 */
async function buildCoredns(ctx: BuildContext): Promise<void> {
  const module = "github.com/coredns/coredns";
  const plugins = [
    "cache",
    "errors",
    "health",
    "kubernetes",
    "loadbalance",
    "log",
    "loop",
    "metrics",
    "ready",
    "reload",
  ];
  await writeFile(
    join(ctx.moduleDir, "go.mod"),
    [
      `module eop.local/${corednsName()}`,
      "",
      "go 1.24.0",
      "",
      `require ${module} v${COREDNS_VERSION}`,
      "",
    ].join("\n"),
  );
  await writeFile(
    join(ctx.moduleDir, "main.go"),
    [
      "// Generated by infra/local/assets.ts: CoreDNS with kubeadm's plugins.",
      "package main",
      "",
      "import (",
      `\t"${module}/coremain"`,
      ...plugins.map((p) => `\t_ "${module}/plugin/${p}"`),
      ")",
      "",
      "func main() { coremain.Run() }",
      "",
    ].join("\n"),
  );
  await runGo(ctx, "resolving modules (go mod tidy)", ["mod", "tidy"]);
  await runGo(ctx, "building coredns", [
    ...["build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", join(ctx.outDir, "coredns"), "."],
  ]);
  await verifyVersion(ctx, join(ctx.outDir, "coredns"), ["-version"], `CoreDNS-${COREDNS_VERSION}`);
}

/** Every `k8s.io/NAME => ./staging/...` replacement in Kubernetes's own go.mod. */
function stagingModules(goMod: string): string[] {
  const names = [...goMod.matchAll(/^\s*(k8s\.io\/[\w.-]+)\s+=>\s+\.\/staging\//gm)].map((m) => m[1]);
  return names.filter((name): name is string => name !== undefined);
}

/**
 * What Kubernetes's own build stamps in (hack/lib/version.sh), so `/version` and `--version` tell the
 * truth. The commit is unknown from a module download, so it is left empty; the build date is the
 * release's publication time from the module proxy, which keeps the build reproducible.
 */
function kubernetesVersionFlags(releaseTime: string): string {
  const [major, minor] = KUBERNETES_VERSION.split(".");
  const values: [string, string][] = [
    ["gitVersion", `v${KUBERNETES_VERSION}`],
    ["gitMajor", major ?? ""],
    ["gitMinor", minor ?? ""],
    ["gitTreeState", "clean"],
    ["gitCommit", ""],
    ["buildDate", releaseTime],
  ];
  const packages = ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"];
  return packages.flatMap((pkg) => values.map(([name, value]) => `-X ${pkg}.${name}=${value}`)).join(" ");
}

// ---------------------------------------------------------------------------------------------------------
// etcd: one wrapper module per version. The server's entry point is etcdmain.Main, exactly as etcd's own
// main.go (server/main.go in the etcd repository) calls it; etcdctl and etcdutl are their modules' main
// packages. The version is compiled into go.etcd.io/etcd/api/v3/version; the only ldflag etcd's build sets
// is the git SHA, which a module download does not know, so it keeps its "Not provided" default.

async function buildEtcd(ctx: BuildContext, version: string): Promise<void> {
  const modules = ["server", "etcdctl", "etcdutl"].map((m) => `go.etcd.io/etcd/${m}/v3`);
  await writeFile(
    join(ctx.moduleDir, "go.mod"),
    [
      `module eop.local/${etcdName(version)}`,
      "",
      "go 1.24.0",
      "",
      "require (",
      ...modules.map((m) => `\t${m} v${version}`),
      ")",
      "",
    ].join("\n"),
  );
  // In a subdirectory so one `go build -o dir/` names the binary "etcd".
  await mkdir(join(ctx.moduleDir, "etcd"), { recursive: true });
  await writeFile(join(ctx.moduleDir, "etcd", "main.go"), ETCD_MAIN_GO);
  const tools = ["go.etcd.io/etcd/etcdctl/v3", "go.etcd.io/etcd/etcdutl/v3"];
  await writeFile(join(ctx.moduleDir, "tools.go"), toolsGo(tools));
  await runGo(ctx, "resolving modules (go mod tidy)", ["mod", "tidy"]);
  await runGo(ctx, "building etcd, etcdctl, etcdutl", [
    ...["build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", `${ctx.outDir}/`],
    ...["./etcd", ...tools],
  ]);
  await verifyVersion(ctx, join(ctx.outDir, "etcd"), ["--version"], `etcd Version: ${version}`);
  await verifyVersion(ctx, join(ctx.outDir, "etcdctl"), ["version"], `etcdctl version: ${version}`);
  await verifyVersion(ctx, join(ctx.outDir, "etcdutl"), ["version"], `etcdutl version: ${version}`);
}

const ETCD_MAIN_GO = `// Generated by infra/local/assets.ts: the etcd server, as etcd's own server/main.go builds it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
`;

// ---------------------------------------------------------------------------------------------------------
// versitygw: a wrapper module requiring github.com/versity/versitygw at the pinned release, building
// its command the way its Makefile does: -s -w and the version in main.Version (a module build has no
// git to ask for the commit and time, so those say "module"/"none").

const VERSITYGW_MODULE = "github.com/versity/versitygw";

async function buildVersitygw(ctx: BuildContext): Promise<void> {
  const version = `v${VERSITYGW_VERSION}`;
  const main = `${VERSITYGW_MODULE}/cmd/versitygw`;
  await wrapperModule(ctx, versitygwName(), `${VERSITYGW_MODULE} ${version}`, [main]);
  await runGo(ctx, "building versitygw", [
    ...["build", "-trimpath", "-buildvcs=false", "-ldflags"],
    `-s -w -X main.Version=${version} -X main.Build=module -X main.BuildTime=none`,
    ...["-o", `${ctx.outDir}/`, main],
  ]);
  await verifyVersion(ctx, join(ctx.outDir, "versitygw"), ["--version"], `Version  : ${version}`);
}

// ---------------------------------------------------------------------------------------------------------
// fake-gcs-server: a wrapper module requiring the pinned release; its command is the module's root
// package.

const FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server";

async function buildFakeGcs(ctx: BuildContext): Promise<void> {
  await wrapperModule(ctx, fakeGcsName(), `${FAKE_GCS_MODULE} v${FAKE_GCS_VERSION}`, [FAKE_GCS_MODULE]);
  await runGo(ctx, "building fake-gcs-server", [
    ...["build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w"],
    ...["-o", join(ctx.outDir, "fake-gcs-server"), FAKE_GCS_MODULE],
  ]);
}

// ---------------------------------------------------------------------------------------------------------
// promtool: a wrapper module requiring github.com/prometheus/prometheus at the module version of the
// pinned release, building cmd/promtool with the version stamp Prometheus's own build (.promu.yml)
// puts in prometheus/common/version (a module build has no git to ask for the revision and branch).
// Built with Prometheus's own `remove_all_sd` tag: without the service discoveries (the clouds' SDKs,
// client-go), which only `promtool check config` and `promtool sd` use, not the rule checks and rule
// unit tests the tests run. It more than halves the build: 3 min instead of 8.5 min on 2 cores.

const PROMETHEUS_MODULE = "github.com/prometheus/prometheus";

/** Prometheus 3.16.0 is the Go module version v0.316.0 (and 3.5.1 is v0.305.1). */
function promtoolModuleVersion(release: string): string {
  const [major = 0, minor = 0, patch = 0] = release.split(".").map(Number);
  return `v0.${major * 100 + minor}.${patch}`;
}

async function buildPromtool(ctx: BuildContext): Promise<void> {
  const main = `${PROMETHEUS_MODULE}/cmd/promtool`;
  const require = `${PROMETHEUS_MODULE} ${promtoolModuleVersion(PROMTOOL_VERSION)}`;
  await wrapperModule(ctx, promtoolName(), require, [main]);
  const pkg = "github.com/prometheus/common/version";
  await runGo(ctx, "building promtool", [
    ...["build", "-trimpath", "-buildvcs=false", "-tags", "remove_all_sd", "-ldflags"],
    `-s -w -X ${pkg}.Version=${PROMTOOL_VERSION} -X ${pkg}.Revision=module -X ${pkg}.Branch=module`,
    ...["-o", `${ctx.outDir}/`, main],
  ]);
  await verifyVersion(ctx, join(ctx.outDir, "promtool"), ["--version"], `version ${PROMTOOL_VERSION}`);
}

/**
 * A wrapper module that requires one released module (`require`: "<module> <version>") and keeps the
 * command packages to build, resolved with \`go mod tidy\`.
 */
async function wrapperModule(ctx: BuildContext, name: string, require: string, commands: string[]) {
  const goMod = [`module eop.local/${name}`, "", "go 1.25.0", "", `require ${require}`, ""].join("\n");
  await writeFile(join(ctx.moduleDir, "go.mod"), goMod);
  await writeFile(join(ctx.moduleDir, "tools.go"), toolsGo(commands));
  await runGo(ctx, "resolving modules (go mod tidy)", ["mod", "tidy"]);
}

/** A file that only exists so \`go mod tidy\` keeps the command packages' modules required. */
function toolsGo(packages: string[]): string {
  const imports = packages.map((p) => `\t_ "${p}"`).join("\n");
  return `// Generated by infra/local/assets.ts.\n//go:build tools\n\npackage tools\n\nimport (\n${imports}\n)\n`;
}

// ---------------------------------------------------------------------------------------------------------
// Running go

const GO_MISSING = [
  "Go is not on PATH: the local control plane's binaries (kube-apiserver, etcd, ...) are built from their Go modules.",
  "Install Go 1.26 or newer from https://go.dev/dl/ (or your package manager) and put its bin directory on PATH.",
  "An older go works too if GOTOOLCHAIN allows it to fetch the toolchain the modules ask for",
  "(GOTOOLCHAIN=auto, the default; GOTOOLCHAIN=local forbids it).",
].join("\n");

async function requireGo(): Promise<void> {
  const result = await run("go", ["version"], {}).catch((error: unknown) => {
    if (error instanceof Error && "code" in error && error.code === "ENOENT") {
      throw new Error(GO_MISSING, { cause: error });
    }
    throw error;
  });
  if (result.code !== 0) throw new Error(`\`go version\` failed:\n${result.output}`);
}

function goEnv(): NodeJS.ProcessEnv {
  // -mod=mod: the wrapper's go.mod and go.sum are ours to update. No cgo: static binaries, no C toolchain.
  return { ...process.env, GOFLAGS: "-mod=mod", CGO_ENABLED: "0" };
}

interface ModuleInfo {
  goMod: string;
  /** The module's extracted source (read-only, in Go's module cache). */
  dir: string;
  /** When the module proxy first saw this version (RFC 3339). */
  time: string;
}

async function downloadModule(ctx: BuildContext, module: string): Promise<ModuleInfo> {
  const output = await runGo(ctx, `downloading ${module}`, ["mod", "download", "-json", module]);
  const parsed: unknown = JSON.parse(output.stdout);
  const goMod = stringField(parsed, "GoMod");
  const infoPath = stringField(parsed, "Info");
  const dir = stringField(parsed, "Dir");
  if (goMod === undefined || infoPath === undefined || dir === undefined) {
    throw new Error(`\`go mod download -json ${module}\` gave no GoMod/Info/Dir: ${output.stdout}`);
  }
  const info: unknown = JSON.parse(await readFile(infoPath, "utf8"));
  return { goMod, dir, time: stringField(info, "Time") ?? "1970-01-01T00:00:00Z" };
}

function stringField(value: unknown, key: string): string | undefined {
  if (typeof value !== "object" || value === null || !(key in value)) return undefined;
  const field: unknown = (value as Record<string, unknown>)[key];
  return typeof field === "string" ? field : undefined;
}

/**
 * Runs go in the wrapper module, teeing its output to the build log. `activity` says what it is doing,
 * for the "still ..." lines a long command prints so nobody wonders whether it hangs.
 */
async function runGo(ctx: BuildContext, activity: string, args: string[]): Promise<RunResult> {
  const command = `go ${args.map(quoteArg).join(" ")}`;
  const logStream = createWriteStream(ctx.logFile, { flags: "a" });
  logStream.write(`$ ${command}\n`);
  const started = Date.now();
  const ticker = setInterval(() => {
    ctx.log(`assets: still ${activity}… ${formatDuration(Date.now() - started)}`);
  }, PROGRESS_EVERY_MS);
  try {
    const result = await run("go", args, { cwd: ctx.moduleDir, env: goEnv(), tee: logStream });
    if (result.code !== 0) {
      const cause = new Error(
        `go exited with ${result.code === null ? `signal ${result.signal}` : `code ${result.code}`}`,
      );
      throw new Error(
        `building ${ctx.label} failed: \`${command}\` in ${ctx.moduleDir}\n` +
          `last lines of its output (all of it: ${ctx.logFile}):\n${lastLines(result.output, ERROR_TAIL_LINES)}`,
        { cause },
      );
    }
    return result;
  } finally {
    clearInterval(ticker);
    await new Promise((resolve) => logStream.end(resolve));
  }
}

/** Refuses to publish a build whose version stamp is wrong (e.g. ldflags that no longer apply). */
async function verifyVersion(
  ctx: BuildContext,
  binary: string,
  args: string[],
  expected: string,
): Promise<void> {
  const result = await run(binary, args, { cwd: ctx.outDir });
  if (result.code !== 0 || !result.output.includes(expected)) {
    throw new Error(
      `building ${ctx.label}: \`${binary} ${args.join(" ")}\` should print "${expected}" but ` +
        `exited with ${result.code} and printed:\n${lastLines(result.output, ERROR_TAIL_LINES)}`,
    );
  }
}

interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  /** stdout and stderr interleaved, as a person would have seen them. */
  output: string;
}

interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  tee?: WriteStream;
}

function run(command: string, args: string[], options: RunOptions): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let output = "";
    child.stdout.setEncoding("utf8");
    child.stderr.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      stdout += chunk;
      output += chunk;
      options.tee?.write(chunk);
    });
    child.stderr.on("data", (chunk: string) => {
      output += chunk;
      options.tee?.write(chunk);
    });
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stdout, output }));
  });
}

function lastLines(text: string, count: number): string {
  return text.trimEnd().split("\n").slice(-count).join("\n");
}

function quoteArg(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : JSON.stringify(arg);
}

function formatDuration(ms: number): string {
  const seconds = Math.round(ms / 1000);
  const minutes = Math.floor(seconds / 60);
  return minutes > 0 ? `${minutes}m${seconds % 60}s` : `${seconds}s`;
}

// ---------------------------------------------------------------------------------------------------------
// CLI

async function check(): Promise<number> {
  const missing = await missingTargets(targets());
  for (const target of missing) console.log(`missing: ${target.label} (${binDir(target.name)})`);
  if (missing.length === 0) console.log(`all assets present in ${join(cacheRoot(), "bin")}`);
  return missing.length === 0 ? 0 : 1;
}

async function main(argv: string[]): Promise<number> {
  if (argv.includes("--check")) return check();
  // --runtime: what the demo needs, without the servers only the tests use.
  const assets = await ensureAssets(argv.includes("--runtime") ? { only: RUNTIME_ASSETS } : {});
  console.log(JSON.stringify(assets, null, 2));
  return 0;
}

if (import.meta.main) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exitCode = 1;
    },
  );
}

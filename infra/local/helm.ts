// Builds Helm from its Go module (helm.sh/helm/v4/cmd/helm at a pinned version) into the project's
// cache, the way infra/local/assets.ts builds kube-apiserver and etcd: no release tarball from the
// internet, only the Go module proxy. Used by the chart tests (helm lint / helm template).
//
// Kept beside assets.ts rather than inside it: Helm is needed only by the packaging tests, and a
// separate module lets those evolve without touching the control plane's build.
//
//   node infra/local/helm.ts          build if missing, print the binary's path
//   node infra/local/helm.ts --check  exit 1 when it is not built
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { cacheRoot } from "./assets.ts";

/** The Helm release we build and test the chart with. */
export const HELM_VERSION = "4.3.2";
const HELM_MODULE = "helm.sh/helm/v4";

/** Written last into a finished build directory; its presence is what "built" means (as in assets.ts). */
const STAMP = ".complete";
const PROGRESS_EVERY_MS = 30_000;

export function helmDir(): string {
  return join(cacheRoot(), "bin", `helm-v${HELM_VERSION}`);
}

export function helmPath(): string {
  return join(helmDir(), "helm");
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

export function isHelmBuilt(): Promise<boolean> {
  return exists(join(helmDir(), STAMP));
}

/**
 * What Helm's own Makefile stamps in, so `helm version` tells the truth. Without it Helm reports
 * "v4.3" and charts that check `.Capabilities.HelmVersion` would see the wrong patch.
 */
function versionFlags(): string {
  const pkg = `${HELM_MODULE}/internal/version`;
  return [`-X ${pkg}.version=v${HELM_VERSION}`, `-X ${pkg}.gitTreeState=clean`].join(" ");
}

/** Makes sure the pinned Helm is built (building it when missing, ~3-5 min on 2 cores) and returns its path. */
export async function ensureHelm(options: { log?: (line: string) => void } = {}): Promise<string> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  if (await isHelmBuilt()) return helmPath();
  const finalDir = helmDir();
  // Beside the final directory so the rename stays on one filesystem (and is atomic).
  const outDir = join(cacheRoot(), "bin", `.tmp-helm-v${HELM_VERSION}-${process.pid}`);
  const logFile = join(cacheRoot(), "build", `helm-v${HELM_VERSION}.log`);
  await mkdir(join(cacheRoot(), "build"), { recursive: true });
  await rm(outDir, { recursive: true, force: true });
  await mkdir(outDir, { recursive: true });
  const started = Date.now();
  log(`helm: building ${HELM_MODULE}/cmd/helm@v${HELM_VERSION} (log: ${logFile})`);
  try {
    // `go install module/cmd@version` needs no wrapper module: Helm's go.mod has no replace directives.
    await runGo(
      [
        "install",
        "-trimpath",
        "-ldflags",
        `-s -w ${versionFlags()}`,
        `${HELM_MODULE}/cmd/helm@v${HELM_VERSION}`,
      ],
      { GOBIN: outDir },
      logFile,
      log,
    );
    const version = await capture(join(outDir, "helm"), ["version", "--short"]);
    if (!version.startsWith(`v${HELM_VERSION}`)) {
      throw new Error(`the built helm reports "${version.trim()}", expected v${HELM_VERSION}`);
    }
    await writeFile(join(outDir, STAMP), `${new Date().toISOString()}\n`);
    // A directory without a stamp is debris; a concurrent builder that got there first wins.
    if (!(await exists(join(finalDir, STAMP)))) await rm(finalDir, { recursive: true, force: true });
    await rename(outDir, finalDir).catch(async (error: unknown) => {
      if (!(await exists(join(finalDir, STAMP)))) throw error;
    });
  } finally {
    await rm(outDir, { recursive: true, force: true });
  }
  log(`helm: built v${HELM_VERSION} in ${Math.round((Date.now() - started) / 1000)} s`);
  return helmPath();
}

function runGo(
  args: string[],
  env: Record<string, string>,
  logFile: string,
  log: (line: string) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const out = createWriteStream(logFile, { flags: "w" });
    out.write(`$ go ${args.join(" ")}\n`);
    const started = Date.now();
    const ticker = setInterval(() => {
      log(`helm: still building… ${Math.round((Date.now() - started) / 1000)} s`);
    }, PROGRESS_EVERY_MS);
    // No cgo: a static binary, no C toolchain needed.
    const child = spawn("go", args, {
      env: { ...process.env, ...env, CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let tail = "";
    const collect = (chunk: Buffer) => {
      out.write(chunk);
      tail = (tail + chunk.toString()).slice(-4_000);
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    child.on("error", (error) => {
      clearInterval(ticker);
      out.end();
      reject(new Error("could not run go (is Go on PATH?)", { cause: error }));
    });
    child.on("close", (code) => {
      clearInterval(ticker);
      out.end();
      if (code === 0) resolve();
      else reject(new Error(`go ${args[0]} of helm failed (exit ${code}); see ${logFile}:\n${tail}`));
    });
  });
}

function capture(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.on("error", reject);
    child.on("close", () => resolve(output));
  });
}

async function main(argv: string[]): Promise<number> {
  if (argv.includes("--check")) {
    const built = await isHelmBuilt();
    console.log(built ? `helm v${HELM_VERSION}: ${helmPath()}` : `missing: helm v${HELM_VERSION}`);
    return built ? 0 : 1;
  }
  console.log(await ensureHelm());
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

// Builds the operator's one native piece: a Node-API addon that calls glibc's malloc_trim
// (infra/native/malloc-trim.c; why the operator wants it: infra/malloc-trim.ts). It is compiled
// with the machine's C compiler against the headers that ship with the running node, and only
// when the addon is missing or older than its source (a warm run costs a stat).
//   node infra/native/build.ts
// Without a C compiler or node's headers it says why and exits 0: the operator then runs without
// trimming, which costs memory, not correctness.
import { execFileSync } from "node:child_process";
import { existsSync, renameSync, statSync } from "node:fs";
import { dirname, join } from "node:path";

const SOURCE = join(import.meta.dirname, "malloc-trim.c");
/** Where the sources load the addon from (infra/malloc-trim.ts); infra/bundle.ts copies it to dist/. */
export const MALLOC_TRIM_ADDON = join(import.meta.dirname, "malloc-trim.node");

export type AddonBuild = { path: string; built: boolean } | { path: undefined; reason: string };

/** node's C headers: beside its binary in every official distribution (bin/node, include/node). */
function nodeHeaders(): string | undefined {
  const dir = join(dirname(process.execPath), "..", "include", "node");
  return existsSync(join(dir, "node_api.h")) ? dir : undefined;
}

function upToDate(): boolean {
  return existsSync(MALLOC_TRIM_ADDON) && statSync(MALLOC_TRIM_ADDON).mtimeMs >= statSync(SOURCE).mtimeMs;
}

export function buildMallocTrimAddon(compiler = process.env.CC || "cc"): AddonBuild {
  if (upToDate()) return { path: MALLOC_TRIM_ADDON, built: false };
  if (process.platform !== "linux")
    return { path: undefined, reason: "malloc_trim is glibc's, on Linux only" };
  const headers = nodeHeaders();
  if (!headers) return { path: undefined, reason: `node's headers are not beside ${process.execPath}` };
  // Written beside and renamed, so a process loading the addon never sees half a file.
  const partial = `${MALLOC_TRIM_ADDON}.partial`;
  try {
    execFileSync(
      compiler,
      ["-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-I", headers, "-o", partial, SOURCE],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
  } catch (error) {
    const detail = error instanceof Error ? error.message.split("\n").slice(0, 3).join(" ") : String(error);
    return { path: undefined, reason: `${compiler} failed: ${detail}` };
  }
  renameSync(partial, MALLOC_TRIM_ADDON);
  return { path: MALLOC_TRIM_ADDON, built: true };
}

if (import.meta.main) {
  const result = buildMallocTrimAddon();
  if (result.path === undefined) {
    process.stderr.write(`malloc_trim addon not built (${result.reason}); the operator runs without it\n`);
  } else if (result.built) {
    process.stderr.write(`built ${result.path}\n`);
  }
}

// glibc's malloc keeps what the process freed: free chunks between live ones stay in its arenas,
// and it only gives memory back from an arena's top on its own. In a busy operator process most
// of what malloc holds is freed soon after (socket reads, Buffers, V8's compiler zones), and the
// holes add up: in bench/control.ts a worker's arenas held 16-28 MiB free of 35-45 MiB (mallinfo),
// and malloc_trim(0), which hands every whole free page back with madvise, took 10-14 MiB off its
// RSS in ~2 ms. Node does not call it, so a small Node-API addon (infra/native/malloc-trim.c,
// built by infra/native/build.ts) does, for the memory keeper (infra/memory-keeper.ts).
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

export interface MallocTrimmer {
  /** malloc_trim(0): true when memory went back to the system. */
  trim(): boolean;
  /** Bytes in malloc's free chunks, all arenas (mallinfo2). */
  freeBytes(): number;
}

/**
 * Beside this module: infra/native/ for the sources, dist/native/ for the bundle (infra/bundle.ts
 * copies it there; every chunk of the bundle sits in dist/).
 */
const ADDON = fileURLToPath(new URL("./native/malloc-trim.node", import.meta.url));

function isTrimmer(value: unknown): value is MallocTrimmer {
  return (
    typeof value === "object" &&
    value !== null &&
    "trim" in value &&
    typeof value.trim === "function" &&
    "freeBytes" in value &&
    typeof value.freeBytes === "function"
  );
}

/** The addon, or why there is none (not built here, not glibc, a broken file). */
export function loadMallocTrimmer(path = ADDON): { trimmer: MallocTrimmer } | { reason: string } {
  if (!existsSync(path)) return { reason: `${path} is not built (node infra/native/build.ts)` };
  try {
    const loaded: unknown = createRequire(import.meta.url)(path);
    return isTrimmer(loaded) ? { trimmer: loaded } : { reason: `${path} does not export trim and freeBytes` };
  } catch (error) {
    return { reason: `${path} did not load: ${error instanceof Error ? error.message : String(error)}` };
  }
}

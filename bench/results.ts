// Benchmark figures as data: `--save` makes a bench write what it printed to
// bench/results/<name>.json with the commit and the machine it ran on; bench/render.ts turns every
// file there into the figures section of docs/benchmarks.md.
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { join } from "node:path";
import { formatted } from "../infra/docs/page.ts";

export const RESULTS_DIR = new URL("./results/", import.meta.url).pathname;

export interface Machine {
  cpus: number;
  cpuModel: string;
  memoryGiB: number;
  kernel: string;
  node: string;
}

/** One bench run's figures: `results` is what the bench printed, one object per scenario. */
export interface ResultsFile {
  bench: string;
  /** What this file's run varied from the bench's defaults (e.g. "3 real nodes"); "" when none. */
  variant: string;
  commit: string;
  /** Whether the working tree had changes the commit does not hold. */
  dirty: boolean;
  machine: Machine;
  finishedAt: string;
  results: Record<string, unknown>[];
}

function git(args: string[]): string {
  return execFileSync("git", args, { cwd: RESULTS_DIR, encoding: "utf8" }).trim();
}

/** Writes bench/results/<file>.json and returns its path. */
export function saveResults(
  file: string,
  bench: string,
  variant: string,
  results: Record<string, unknown>[],
): string {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const record: ResultsFile = {
    bench,
    variant,
    commit: git(["rev-parse", "HEAD"]),
    // The bench's own outputs do not count: a run saved just before would make this one look dirty.
    dirty:
      git([
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ":(top)",
        ":(top,exclude)bench/results",
        ":(top,exclude)docs/benchmarks.md",
      ]) !== "",
    machine: {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? "unknown",
      memoryGiB: Math.round(totalmem() / 1024 ** 3),
      kernel: release(),
      node: process.version,
    },
    finishedAt: new Date().toISOString(),
    results,
  };
  const path = join(RESULTS_DIR, `${file}.json`);
  // As Biome formats JSON, so that the lint step passes on a saved run.
  writeFileSync(path, formatted(`${JSON.stringify(record, null, 2)}\n`, path));
  return path;
}

/** Every results file, by file name. */
export function readResults(dir = RESULTS_DIR): ResultsFile[] {
  // By name without ".json": "convergence" before "convergence-real-nodes".
  return readdirSync(dir)
    .filter((name) => name.endsWith(".json"))
    .map((name) => name.slice(0, -".json".length))
    .sort()
    .map((name) => JSON.parse(readFileSync(join(dir, `${name}.json`), "utf8")) as ResultsFile);
}

// What every benchmark reports about repeated measurements and the machine they ran on.
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";

export interface Summary {
  median: number;
  min: number;
  max: number;
  /** Every measurement, sorted. */
  samples: number[];
}

/** Median (the upper one for an even count), spread and samples, rounded to `digits`. */
export function summary(values: readonly number[], digits = 0): Summary {
  const round = (n: number) => Number(n.toFixed(digits));
  const sorted = [...values].sort((a, b) => a - b).map(round);
  return {
    median: sorted[Math.floor(sorted.length / 2)] ?? 0,
    min: sorted[0] ?? 0,
    max: sorted[sorted.length - 1] ?? 0,
    samples: sorted,
  };
}

/** The 1/5/15-minute load averages, for judging how quiet the machine was. */
export function load(): number[] {
  return loadavg().map((l) => Number(l.toFixed(2)));
}

/** `a / b` to two decimals (0 when b is 0). */
export function ratio(a: number, b: number): number {
  return b === 0 ? 0 : Number((a / b).toFixed(2));
}

/** CPU seconds (user + system) a process has used so far; NaN once it is gone. */
export function processCpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    // Fields after the command (which may hold spaces) start at state; utime and stime are 14 and 15.
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return Number.NaN;
  }
}

/** A process's resident memory in MiB, to `digits` decimals; NaN without a pid. */
export function processRssMiB(pid: number | undefined, digits = 0): number {
  if (pid === undefined) return Number.NaN;
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number((Number(match?.[1] ?? 0) / 1024).toFixed(digits));
}

/**
 * CPU seconds the whole machine has spent busy so far (all cores; /proc/stat's first line less
 * idle and iowait): across a scenario, the work it cost whatever process did it.
 */
export function machineBusySeconds(): number {
  const fields = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "").trim().split(/\s+/).slice(1);
  const ticks = fields.slice(0, 7).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0] = ticks;
  return (user + nice + system + irq + softirq) / 100;
}

/**
 * With BENCH_KEEP_LOGS=DIR, copies the operator processes' logs (and the cluster's daemon logs)
 * there before the cluster and its folder go: to read what the operator did during a run.
 */
export function keepLogs(clusterDir: string, progress: (line: string) => void): void {
  const target = process.env.BENCH_KEEP_LOGS;
  if (!target) return;
  mkdirSync(target, { recursive: true });
  for (const sub of ["operator-logs", "logs"]) {
    const from = join(clusterDir, sub);
    if (existsSync(from)) cpSync(from, join(target, sub), { recursive: true });
  }
  progress(`logs kept in ${target}`);
}

/**
 * Touches most of the machine's free memory once, in a child process that then exits. This machine
 * is a VM whose host backs guest memory on first touch: writing fresh pages cost ~3 s per GiB the
 * first time and ~1 s after (a C loop touching a page at a time), so whichever scenario first
 * filled the page cache (a reference's snapshot file, the store's objects) paid for it, and run 1
 * of every set was the slowest. Once, before anything is measured, for the reference and the
 * operator alike.
 */
export function warmMachineMemory(progress: (line: string) => void): void {
  const free =
    Number(/MemAvailable:\s+(\d+) kB/.exec(readFileSync("/proc/meminfo", "utf8"))?.[1] ?? 0) * 1024;
  const gib = Math.max(0, Math.floor(free / 1024 ** 3) - 2);
  if (gib === 0) return;
  const started = performance.now();
  const script = `const held = []; for (let i = 0; i < ${gib}; i++) held.push(Buffer.alloc(1024 ** 3, 1));`;
  execFileSync(process.execPath, ["-e", script], { stdio: "ignore", timeout: 600_000 });
  progress(
    `touched ${gib} GiB of free memory once in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
}

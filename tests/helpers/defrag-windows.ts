// When the operator defragmented each member and moved leadership, read from its log, and what a
// quorum writer saw meanwhile: the longest time without an acknowledged write around each window.
// Shared by the day-2 test and bench/defrag.ts.
import { readFileSync } from "node:fs";
import type { AcknowledgedWrite } from "./writer.ts";

interface LogLine {
  time: number;
  msg?: string;
  member?: string;
  seconds?: number;
  reason?: string;
  cluster?: string;
}

export interface DefragWindow {
  member: string;
  /** When the defragmentation started and ended (ms since the epoch). */
  startMs: number;
  endMs: number;
}

export interface MaintenanceLog {
  defrags: DefragWindow[];
  /** When the operator logged a leader move (etcd had answered it). */
  leaderMovesMs: number[];
}

/** The defragmentations and leader moves of `namespace/cluster` in an operator's log since `sinceMs`. */
export function maintenanceLog(logFile: string, cluster: string, sinceMs = 0): MaintenanceLog {
  const lines = readFileSync(logFile, "utf8")
    .split("\n")
    .flatMap((line) => {
      try {
        const parsed = JSON.parse(line) as LogLine;
        return parsed.cluster === cluster && parsed.time >= sinceMs ? [parsed] : [];
      } catch {
        return [];
      }
    });
  return {
    defrags: lines
      .filter((l) => l.msg === "member defragmented" && typeof l.seconds === "number")
      .map((l) => ({ member: l.member ?? "", startMs: l.time - (l.seconds ?? 0) * 1000, endMs: l.time })),
    leaderMovesMs: lines.filter((l) => l.reason === "LeaderMoved").map((l) => l.time),
  };
}

/** The longest time between two acknowledgements (sorted by time) that overlaps [fromMs, toMs]. */
export function longestGapAround(acks: readonly AcknowledgedWrite[], fromMs: number, toMs: number): number {
  let longest = 0;
  for (let i = 1; i < acks.length; i++) {
    const before = acks[i - 1]?.atMs ?? 0;
    const after = acks[i]?.atMs ?? 0;
    if (after >= fromMs && before <= toMs) longest = Math.max(longest, after - before);
  }
  return longest;
}

/**
 * The writes' pause a leader move itself caused: from the later of the last acknowledgement before
 * it and the end of the defragmentation before it (whose stall is that one's own) to the first
 * acknowledgement after it or the start of the next defragmentation, whichever comes first.
 */
export function leaderMovePause(
  acks: readonly AcknowledgedWrite[],
  movedAtMs: number,
  defrags: readonly DefragWindow[],
): number {
  const lastBefore = [...acks].reverse().find((a) => a.atMs <= movedAtMs)?.atMs ?? movedAtMs;
  const previousEnd = Math.max(0, ...defrags.filter((d) => d.endMs <= movedAtMs).map((d) => d.endMs));
  const nextStart = Math.min(
    Number.POSITIVE_INFINITY,
    ...defrags.filter((d) => d.endMs > movedAtMs).map((d) => d.startMs),
  );
  const firstAfter = acks.find((a) => a.atMs > movedAtMs)?.atMs ?? movedAtMs;
  return Math.max(0, Math.min(firstAfter, nextStart) - Math.max(lastBefore, previousEnd));
}

// What every benchmark reports about repeated measurements and the machine they ran on.
import { loadavg } from "node:os";

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

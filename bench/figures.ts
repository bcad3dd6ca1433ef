// What each bench's saved results say against their goals, in one shape for the page and the chart:
// a row per figure with its goal. The benches print what suits each measurement (milliseconds for
// convergence, seconds for backups, rates and MiB for control); this module is the one place that
// knows those shapes.
import type { ResultsFile } from "./results.ts";

export interface Spread {
  median: number;
  min: number;
  max: number;
}

/** A figure measured against a reference in the same run: their ratio is what has a goal. */
export interface RatioRow {
  kind: "ratio";
  scenario: string;
  /** In seconds. */
  operator: Spread;
  reference: Spread;
  ratio: number;
  goal: number;
}

/** A figure with a goal of its own (a rate, a latency, a size). */
export interface GoalRow {
  kind: "goal";
  scenario: string;
  measure: string;
  value: Spread;
  unit: string;
  goal: { atMost: number } | { atLeast: number };
}

export type Row = RatioRow | GoalRow;

type Result = Record<string, unknown>;

export function isSpread(value: unknown): value is Spread {
  return (
    typeof value === "object" &&
    value !== null &&
    ["median", "min", "max"].every((k) => typeof (value as Record<string, unknown>)[k] === "number")
  );
}

const field = (value: unknown, key: string): unknown =>
  typeof value === "object" && value !== null ? (value as Record<string, unknown>)[key] : undefined;
const num = (value: unknown): number | undefined => (typeof value === "number" ? value : undefined);
export const scaled = (s: Spread, by: number): Spread => ({
  median: s.median * by,
  min: s.min * by,
  max: s.max * by,
});

export function scenarioName(result: Result): string {
  const lost = typeof result.lost === "string" ? ` a ${result.lost}` : "";
  return `\`${String(result.scenario)}\`${lost}`;
}

function ratioRow(result: Result, operator: unknown, reference: unknown, goal: unknown, toSeconds: number) {
  const ratio = num(result.ratio);
  if (!isSpread(operator) || !isSpread(reference) || ratio === undefined || num(goal) === undefined)
    return [];
  const row: RatioRow = {
    kind: "ratio",
    scenario: scenarioName(result),
    operator: scaled(operator, toSeconds),
    reference: scaled(reference, toSeconds),
    ratio,
    goal: num(goal) ?? 0,
  };
  return [row];
}

function goalRow(result: Result, measure: string, value: unknown, unit: string, goal: GoalRow["goal"]) {
  if (!isSpread(value)) return [];
  const row: GoalRow = { kind: "goal", scenario: scenarioName(result), measure, value, unit, goal };
  return [row];
}

/** A spread of one value per process (the control bench's RSS of each worker). */
function spreadOf(values: unknown): Spread | undefined {
  if (!Array.isArray(values) || !values.every((v) => typeof v === "number") || values.length === 0) return;
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)] ?? 0, min: sorted[0] ?? 0, max: sorted.at(-1) ?? 0 };
}

function rowsOf(bench: string, result: Result): Row[] {
  switch (`${bench}/${String(result.scenario)}`) {
    case "convergence/create":
    case "convergence/heal":
      return ratioRow(result, result.operatorMs, result.referenceMs, result.goal, 1 / 1000);
    case "backup/backup":
      return [
        ...ratioRow(
          result,
          result.seconds,
          field(result.reference, "seconds"),
          field(result.goal, "ratioAtMost"),
          1,
        ),
        ...goalRow(result, "backup worker's RSS growth", result.workerRssGrowthMiB, "MiB", {
          atMost: num(field(result.goal, "rssGrowthMiBAtMost")) ?? 64,
        }),
      ];
    case "backup/restore":
      return ratioRow(
        result,
        result.secondsToServing,
        field(result.reference, "seconds"),
        field(result.goal, "ratioAtMost"),
        1,
      );
    case "control/control": {
      const rss = field(result, "rssMiB");
      const watcher = num(field(rss, "watcher"));
      const workers = spreadOf(field(rss, "workers"));
      const rssGoal = { atMost: num(result.goalRssMiB) ?? 150 };
      return [
        ...goalRow(result, "reconciles per second per worker", result.reconcilesPerSecondPerWorker, "/s", {
          atLeast: num(result.goalPerWorker) ?? 300,
        }),
        ...goalRow(result, "queue wait p99 (per run)", field(result.queueWaitMs, "p99"), "ms", {
          atMost: num(result.goalP99Ms) ?? 20,
        }),
        ...(watcher === undefined
          ? []
          : goalRow(result, "watcher RSS", { median: watcher, min: watcher, max: watcher }, "MiB", rssGoal)),
        ...goalRow(result, "worker RSS (per worker)", workers, "MiB", rssGoal),
      ];
    }
    case "defrag/defrag":
      return [
        ...goalRow(
          result,
          "longest write gap over the member's own defrag time (per member)",
          result.gapOverDefrag,
          "×",
          {
            atMost: num(field(result.goal, "gapOverDefragAtMost")) ?? 1,
          },
        ),
        ...goalRow(result, "write pause at the leader move (per run)", result.leaderMoveGapMs, "ms", {
          atMost: num(field(result.goal, "leaderMoveGapMsAtMost")) ?? 1000,
        }),
      ];
    case "redis-outage/redis-outage":
      return goalRow(
        result,
        "every cluster caught up after Redis is back (slowest cluster, per run)",
        field(result.catchUpMs, "max"),
        "ms",
        { atMost: num(field(result.goal, "catchUpMaxMsAtMost")) ?? 30_000 },
      );
    case "rest/rest": {
      const rest = field(result, "rest");
      const warm = num(field(field(result.round, "warm"), "operatorAndRedisCpuSeconds"));
      return [
        ...goalRow(
          result,
          "operator + Redis CPU at rest, one 3-member cluster (per window)",
          field(rest, "cpuSeconds"),
          "s",
          {
            atMost: 0.15,
          },
        ),
        ...goalRow(result, "`--role all` RSS at rest (per window)", field(rest, "rssMiB"), "MiB", {
          atMost: 80,
        }),
        ...(warm === undefined
          ? []
          : goalRow(
              result,
              "operator + Redis CPU for create, heal and scale (warm)",
              { median: warm, min: warm, max: warm },
              "s",
              {
                atMost: num(field(result.round, "goal")) ?? 0.35,
              },
            )),
        ...goalRow(
          result,
          "heal on a volume: delete to a healthy member (per run)",
          result.healOnVolumeMs,
          "ms",
          {
            atMost: num(field(result.healOnVolumeMs, "goal")) ?? 450,
          },
        ),
      ];
    }
    case "soak/soak": {
      const bound = num(result.boundMs) ?? 120_000;
      const byKind = field(result, "convergeMsByKind");
      const kinds = typeof byKind === "object" && byKind !== null ? Object.entries(byKind) : [];
      const lost = num(result.writesMissingAtEnd) ?? 0;
      return [
        ...kinds.flatMap(([kind, figures]) => {
          const p50 = num(field(figures, "p50"));
          const min = num(field(figures, "min"));
          const max = num(field(figures, "max"));
          if (p50 === undefined || min === undefined || max === undefined) return [];
          const rounds = num(field(figures, "rounds")) ?? 0;
          const measure = `convergence after \`${kind}\` (${rounds} round${rounds === 1 ? "" : "s"}; p99 ${num(field(figures, "p99"))} ms)`;
          return goalRow(result, measure, { median: p50, min, max }, "ms", { atMost: bound });
        }),
        ...goalRow(
          result,
          `acknowledged writes lost (of ${num(result.writesAcknowledged) ?? 0})`,
          { median: lost, min: lost, max: lost },
          "",
          { atMost: 0 },
        ),
      ];
    }
    default:
      return [];
  }
}

/** Every figure a saved run holds that has a goal. */
export function rows(file: ResultsFile): Row[] {
  return file.results.flatMap((result) => rowsOf(file.bench, result));
}

/** Whether the figure meets its goal; a spread must meet it in every run for a goal of its own. */
export function met(row: Row): boolean {
  if (row.kind === "ratio") return row.ratio <= row.goal;
  return "atMost" in row.goal ? row.value.max <= row.goal.atMost : row.value.min >= row.goal.atLeast;
}

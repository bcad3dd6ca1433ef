import { saveResults } from "../bench/results.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import {
  deleteMemberPod,
  endpointsOf,
  type Fault,
  killMemberProcess,
  OTHER_FAULTS,
  percentile,
  type RoundResult,
  redisFailover,
  redisOutage,
  runRound,
  startChaosCluster,
  type Target,
  waitConverged,
} from "./helpers/chaos.ts";
import { createCluster } from "./helpers/clusters.ts";
import { chooser, seedFrom } from "./helpers/random.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

if (process.env.CHAOS_SOAK !== "1") {
  process.stderr.write(
    "the chaos soak runs for the better part of an hour: run it with CHAOS_SOAK=1 (npm run soak)\n",
  );
  process.exit(2);
}

const SEED = seedFrom(process.env.CHAOS_SEED);
const ROUNDS = Number(process.env.CHAOS_SOAK_ROUNDS ?? 100);
const BOUND_MS = 120_000;
const log = (line: string) => process.stdout.write(`[soak ${new Date().toISOString()}] ${line}\n`);
log(`CHAOS_SEED=${SEED} rounds=${ROUNDS}`);

const startedAt = Date.now();
// The operator runs on a Redis Sentinel group, as production installs do: the Redis faults then
// include a failover of its primary besides outages and a wipe.
const { local, c, operator, sentinel } = await startChaosCluster("soak-chaos", { sentinel: true });
const rand = chooser(SEED);
const target: Target = {
  local,
  c,
  namespace: "default",
  name: "soak",
  size: 3,
  operator,
  rand,
  ...(sentinel ? { sentinel } : {}),
};
const results: RoundResult[] = [];
let failure: string | undefined;
let writesChecked = 0;
let writer: ReturnType<typeof startWriter> | undefined;

const others = Object.entries({
  ...OTHER_FAULTS,
  "redis-failover": redisFailover,
  "redis-outage": redisOutage,
});
// Every OTHER_EVERY-th round adds one of the other faults, in turn: each comes up at least once.
const OTHER_EVERY = Math.max(1, Math.min(10, Math.floor(ROUNDS / others.length)));
try {
  await createCluster(c, "default", "soak", { size: 3, version: newestPatchOf("3.6") });
  await waitConverged(target, Date.now(), BOUND_MS);
  writer = startWriter(() => endpointsOf(target), "soak/");
  for (let round = 1; round <= ROUNDS; round++) {
    const plan: [string, Fault][] = [
      rand.chance(0.5) ? ["kill-member-process", killMemberProcess] : ["delete-member-pod", deleteMemberPod],
    ];
    if (round % OTHER_EVERY === 0) {
      const other = others[(round / OTHER_EVERY - 1) % others.length];
      if (other) plan.push(other);
    }
    for (const [name, fault] of plan) {
      const result = await runRound(target, writer, fault, BOUND_MS);
      results.push(result);
      writesChecked += result.writesChecked;
      log(
        `round ${round} ${name}: ${result.detail}; converged in ${result.convergeMs} ms; ` +
          `longest write gap ${result.longestWriteGapMs} ms; ${result.writesChecked} writes checked, ${result.missing.length} missing`,
      );
      if (result.missing.length > 0)
        throw new Error(`acknowledged writes missing: ${result.missing.map((w) => w.key).join(", ")}`);
    }
  }
} catch (error) {
  failure =
    error instanceof Error
      ? `${error.message}${error.cause ? ` (${String(error.cause)})` : ""}`
      : String(error);
  log(`FAILED: ${failure}`);
}

const final = writer ? await writer.stop() : { acknowledged: [], attempted: 0, longestGapMs: 0 };
const finalMissing = failure
  ? []
  : await missingWrites(await endpointsOf(target), final.acknowledged).catch(() => []);
const kinds = [...new Set(results.map((r) => r.kind))].sort();
const times = results.map((r) => r.convergeMs);
const summary = {
  scenario: "soak",
  seed: SEED,
  rounds: results.length,
  memberRounds: results.filter((r) => r.kind === "kill-member-process" || r.kind === "delete-member-pod")
    .length,
  faults: Object.fromEntries(kinds.map((k) => [k, results.filter((r) => r.kind === k).length])),
  convergeMs: { p50: percentile(times, 50), p99: percentile(times, 99), max: Math.max(0, ...times) },
  convergeMsByKind: Object.fromEntries(
    kinds.map((k) => {
      const of = results.filter((r) => r.kind === k);
      const ms = of.map((r) => r.convergeMs);
      const gaps = of.map((r) => r.longestWriteGapMs);
      return [
        k,
        {
          rounds: of.length,
          min: Math.min(...ms),
          p50: percentile(ms, 50),
          p99: percentile(ms, 99),
          max: Math.max(0, ...ms),
          longestWriteGapMs: Math.max(0, ...gaps),
        },
      ];
    }),
  ),
  boundMs: BOUND_MS,
  writesAcknowledged: final.acknowledged.length,
  writesAttempted: final.attempted,
  writeReadsChecked: writesChecked,
  writesMissingAtEnd: finalMissing.length,
  longestWriteGapMs: final.longestGapMs,
  durationS: Math.round((Date.now() - startedAt) / 1000),
  failure,
};
process.stdout.write(`${JSON.stringify(summary)}\n`);
// CHAOS_SOAK_SAVE=1 keeps the figures in bench/results/soak.json (rendered on docs/benchmarks.md).
if (process.env.CHAOS_SOAK_SAVE === "1" && !failure) {
  const variant = ROUNDS === 100 ? "" : `${ROUNDS} rounds`;
  log(`saved ${saveResults("soak", "soak", variant, [summary])}`);
}
await operator.stopAll();
await local.stop();
process.exit(failure || finalMissing.length > 0 ? 1 : 0);

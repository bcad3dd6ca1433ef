import t from "tap";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import {
  endpointsOf,
  type Fault,
  killMemberProcess,
  killWorkerAtSteps,
  OTHER_FAULTS,
  percentile,
  type RoundResult,
  runRound,
  startChaosCluster,
  type Target,
  waitConverged,
} from "./helpers/chaos.ts";
import { createCluster } from "./helpers/clusters.ts";
import { chooser, seedFrom } from "./helpers/random.ts";
import { missingWrites, startWriter, type Writer } from "./helpers/writer.ts";

const SEED = seedFrom(process.env.CHAOS_SEED);
/** Every fault must be healed within this (a replaced member: lease expiry, remove, add, catch up). */
const BOUND_MS = 120_000;
const NS = "default";
t.comment(`CHAOS_SEED=${SEED} (set it to replay this run)`);

const { local, c, operator } = await startChaosCluster("e2e-chaos");
t.teardown(() => local.stop());
t.teardown(() => operator.stopAll());

const rand = chooser(SEED);
const target: Target = { local, c, namespace: NS, name: "chaos", size: 3, operator, rand };
const results: RoundResult[] = [];

t.test("the cluster is created while the worker is SIGKILLed as it seeds", async (t) => {
  const started = Date.now();
  const report = await killWorkerAtSteps(target, ["seed"], async () => {
    await createCluster(c, NS, "chaos", { size: 3, version: newestPatchOf("3.6") });
    return "EtcdCluster chaos created";
  });
  const ms = await waitConverged(target, started, BOUND_MS);
  t.pass(`${report.detail}; Available in ${ms} ms`);
  writer = startWriter(() => endpointsOf(target), "chaos/");
});

// Started once the cluster serves (below), so its figures are about the faults, not the bootstrap.
let writer: Writer | undefined;
const running = (): Writer => {
  if (!writer) throw new Error("the cluster was never created");
  return writer;
};

// Each class once, in an order drawn from the seed.
const plan: [string, Fault][] = [
  ...Object.entries(OTHER_FAULTS),
  // Member pods are deleted in most of the other faults; a member's process is killed here.
  ["kill-member-process", killMemberProcess],
];
for (let i = plan.length - 1; i > 0; i--) {
  const j = rand.int(i + 1);
  [plan[i], plan[j]] = [plan[j] as [string, Fault], plan[i] as [string, Fault]];
}

for (const [index, [kind, fault]] of plan.entries()) {
  t.test(
    `fault ${index + 1}/${plan.length} (CHAOS_SEED=${SEED}): ${kind}; converges within ${BOUND_MS / 1000} s, nothing acknowledged lost`,
    async (t) => {
      const result = await runRound(target, running(), fault, BOUND_MS);
      results.push(result);
      t.comment(
        `${result.detail}: converged in ${result.convergeMs} ms; longest time without an acknowledged write ${result.longestWriteGapMs} ms`,
      );
      t.ok(result.convergeMs <= BOUND_MS, `converged in ${result.convergeMs} ms`);
      t.ok(result.writesChecked > 0, `${result.writesChecked} acknowledged writes so far`);
      t.same(
        result.missing.map((w) => w.key),
        [],
        `every one of the ${result.writesChecked} acknowledged writes reads back`,
      );
    },
  );
}

t.test("the writer kept writing through the faults", async (t) => {
  const { acknowledged, attempted, longestGapMs } = await running().stop();
  t.ok(acknowledged.length > 100, `${acknowledged.length} of ${attempted} writes acknowledged`);
  const missing = await missingWrites(await endpointsOf(target), acknowledged);
  t.same(
    missing.map((w) => w.key),
    [],
    "all of them read back at the end",
  );
  const times = results.map((r) => r.convergeMs);
  const summary = {
    seed: SEED,
    rounds: results.length,
    faults: Object.fromEntries(
      [...new Set(results.map((r) => r.kind))].map((k) => [k, results.filter((r) => r.kind === k).length]),
    ),
    convergeMs: { p50: percentile(times, 50), p99: percentile(times, 99), max: Math.max(...times) },
    writesAcknowledged: acknowledged.length,
    writesAttempted: attempted,
    longestWriteGapMs: longestGapMs,
  };
  t.comment(JSON.stringify(summary));
  t.equal(results.length, plan.length, "every fault ran");
});

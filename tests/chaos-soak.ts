// Chaos, the long run (not part of `npm test`): `npm run soak` (CHAOS_SOAK=1 node tests/chaos-soak.ts).
// One size-3 cluster under a quorum writer; CHAOS_SOAK_ROUNDS (default 100) rounds of killing a random
// member (its etcd process SIGKILLed, or its pod deleted), and after every tenth one, one of the other
// fault classes in turn (worker SIGKILLed at each step of a replacement and at ensure-services, watcher
// SIGKILLed, three workers, Redis restarted and wiped, kube-apiserver restarted, a data dir deleted, a
// partition). After each: converged within BOUND_MS and every acknowledged write read back. Prints a
// line per round and, at the end, one JSON object: rounds, faults by kind, convergence p50/p99 (also
// by kind), writes acknowledged and checked. Exits 1 on the first round that fails. CHAOS_SEED replays.
import { CustomObjectsApi } from "@kubernetes/client-node";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor } from "../infra/local/kube-wait.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import {
  deleteMemberPod,
  endpointsOf,
  type Fault,
  killMemberProcess,
  OTHER_FAULTS,
  percentile,
  type RoundResult,
  runRound,
  startOperatorRoles,
  type Target,
  waitConverged,
} from "./helpers/chaos.ts";
import { type ClusterClients, createCluster } from "./helpers/clusters.ts";
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
const local = await startLocalCluster({ name: "soak-chaos" });
const { kc, core } = clientsFor(local.kubeconfigPath);
const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
const operator = startOperatorRoles(local, {
  MEMBER_UNHEALTHY_GRACE_MS: "20000",
  LEASE_TTL_MS: "5000",
  LOG_LEVEL: "debug",
});
const rand = chooser(SEED);
const target: Target = { local, c, namespace: "default", name: "soak", size: 3, operator, rand };
const results: RoundResult[] = [];
let failure: string | undefined;
let writesChecked = 0;
let writer: ReturnType<typeof startWriter> | undefined;

const others = Object.entries(OTHER_FAULTS);
try {
  await createCluster(c, "default", "soak", { size: 3, version: newestPatchOf("3.6") });
  await waitConverged(target, Date.now(), BOUND_MS);
  writer = startWriter(() => endpointsOf(target), "soak/");
  for (let round = 1; round <= ROUNDS; round++) {
    const plan: [string, Fault][] = [
      rand.chance(0.5) ? ["kill-member-process", killMemberProcess] : ["delete-member-pod", deleteMemberPod],
    ];
    if (round % 10 === 0) {
      const other = others[(round / 10 - 1) % others.length];
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
        { p50: percentile(ms, 50), p99: percentile(ms, 99), longestWriteGapMs: Math.max(0, ...gaps) },
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
await operator.stopAll();
await local.stop();
process.exit(failure || finalMissing.length > 0 ? 1 : 0);

// Benchmark: the operator defragmenting a fragmented cluster under a quorum writer.
//   node bench/defrag.ts [--gib N] [--runs R] [--save]
// Each run: a size-3 cluster (automatic defragmentation off) is filled with N GiB of 1 MiB values
// (0.6 by default: a database file of about 1 GiB), every other one deleted and the history
// compacted, so about two thirds of every member's file are free pages and a defragmentation copies
// the live third; a writer puts a key every 10 ms through every member and records each
// acknowledgement; then
// defragmentation is switched on and the operator defragments the members one at a time (the
// leader last, after handing leadership on). From the operator's log: each member's defrag time
// and when leadership moved; from the writer: the longest time without an acknowledged write
// around each member's defrag and around the leader move.
// Goals: no gap longer than the member's own defrag (a follower's: its writes wait for it), and
// at the leader move a gap under 1 s.
// One JSON object on stdout (progress on stderr); never part of the default tests.
import { parseArgs } from "node:util";
import { Etcd3 } from "etcd3";
import { waitFor } from "../infra/local/kube-wait.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { eventsOf, fillKeyspace, startClusterWithStore } from "../tests/helpers/backups.ts";
import {
  createCluster,
  deleteCluster,
  etcdClient,
  memberEndpoints,
  patchSpec,
  waitReady,
} from "../tests/helpers/clusters.ts";
import { leaderMovePause, longestGapAround, maintenanceLog } from "../tests/helpers/defrag-windows.ts";
import { type OperatorProcess, startOperatorProcess } from "../tests/helpers/operator-processes.ts";
import { missingWrites, startWriter } from "../tests/helpers/writer.ts";
import { operatorBuild } from "./operator-entry.ts";
import { saveResults } from "./results.ts";
import { keepLogs, load, summary, warmMachineMemory } from "./stats.ts";

const { values } = parseArgs({
  options: {
    gib: { type: "string", default: "0.6" },
    runs: { type: "string", default: "3" },
    save: { type: "boolean", default: false },
  },
});
const bytes = Number(values.gib) * 1024 ** 3;
const runs = Number(values.runs);
const NS = "default";
const MIB = 1024 * 1024;
const LEADER_MOVE_GOAL_MS = 1_000;
const WRITE_INTERVAL_MS = 10;
const progress = (line: string) => process.stderr.write(`${new Date().toISOString()} ${line}\n`);

warmMachineMemory(progress);
const operator = await operatorBuild(progress);
const { local: cluster, clients: c } = await startClusterWithStore({
  name: "bench-defrag",
  bucket: "unused",
  log: () => {},
});
const worker: OperatorProcess = startOperatorProcess(cluster, "all", { LOG_LEVEL: "info" }, operator.entry);

async function oneRun(index: number) {
  const name = `frag-${index}`;
  await createCluster(c, NS, name, {
    size: 3,
    version: newestPatchOf("3.6"),
    maintenance: { defragmentation: { enabled: false, thresholdPercent: 40, minimumBytes: 8 * MIB } },
  });
  await waitReady(c, NS, name, 3, 120_000);
  const client = await etcdClient(c, NS, name);
  progress(`${name}: filling ${values.gib} GiB`);
  const count = await fillKeyspace(client, bytes);
  let revision = "0";
  for (let i = 0; i < count; i += 2) {
    revision = (await client.delete().key(`fill/${String(i).padStart(6, "0")}`)).header.revision;
  }
  await client.kv.compact({ revision, physical: true });
  client.close();
  const hosts = await memberEndpoints(c, NS, name);
  const writer = startWriter(() => memberEndpoints(c, NS, name), "w/", { intervalMs: WRITE_INTERVAL_MS });
  // Members count their free pages at their next commit: the writer's puts make them.
  const sizes = await waitFor(
    "every member to apply the compaction",
    async () => {
      const statuses = await Promise.all(
        hosts.map(async (host) => {
          // One member's own Status: a client of all of them would answer from any.
          const etcd = new Etcd3({ hosts: host, grpcOptions: { "grpc.use_local_subchannel_pool": 1 } });
          try {
            const s = await etcd.maintenance.status();
            return { host, size: Number(s.dbSize), inUse: Number(s.dbSizeInUse) };
          } finally {
            etcd.close();
          }
        }),
      );
      return statuses.every((s) => s.inUse < s.size * 0.6) ? statuses : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 200 },
  );
  progress(
    `${name}: files ${sizes.map((s) => `${(s.size / MIB).toFixed(0)} MiB`).join(", ")}; defragmenting`,
  );
  const switchedOn = Date.now();
  await patchSpec(c, NS, name, { maintenance: { defragmentation: { enabled: true } } });
  await waitFor(
    "every member defragmented",
    async () =>
      (await eventsOf(c, NS, "EtcdCluster", name)).filter((e) => e.reason === "MemberDefragmented").length >=
      3
        ? true
        : undefined,
    { timeoutMs: 600_000, intervalMs: 200 },
  );
  await new Promise((r) => setTimeout(r, 1_000));
  const written = await writer.stop();
  const lost = await missingWrites(hosts, written.acknowledged);
  const acks = [...written.acknowledged].sort((a, b) => a.atMs - b.atMs);
  const log = maintenanceLog(worker.logFile, `${NS}/${name}`, switchedOn);
  const defrags = log.defrags.map((d) => ({
    member: d.member,
    defragMs: Math.round(d.endMs - d.startMs),
    gapMs: longestGapAround(acks, d.startMs, d.endMs),
  }));
  const movedAt = log.leaderMovesMs[0];
  const leaderMoveGapMs = movedAt === undefined ? undefined : leaderMovePause(acks, movedAt, log.defrags);
  const overallGapMs = written.longestGapMs;
  progress(
    `${name}: ${defrags.map((d) => `${d.member} ${d.defragMs} ms (gap ${d.gapMs} ms)`).join(", ")}; ` +
      `leader move gap ${leaderMoveGapMs} ms; ${acks.length} writes, ${lost.length} lost`,
  );
  await deleteCluster(c, NS, name);
  return {
    fileMiB: sizes.map((s) => Math.round(s.size / MIB)),
    inUseMiB: sizes.map((s) => Math.round(s.inUse / MIB)),
    defrags,
    leaderMoveGapMs,
    overallGapMs,
    acknowledged: acks.length,
    lost: lost.length,
  };
}

try {
  const results = [];
  for (let i = 1; i <= runs; i++) results.push(await oneRun(i));
  const all = results.flatMap((r) => r.defrags);
  const result = {
    scenario: "defrag",
    build: operator.build,
    gib: Number(values.gib),
    runs,
    defragMs: summary(all.map((d) => d.defragMs)),
    gapMs: summary(all.map((d) => d.gapMs)),
    // Per member: the longest write gap around its defrag over the defrag's own time (goal ≤ 1).
    gapOverDefrag: summary(
      all.map((d) => (d.defragMs === 0 ? 0 : d.gapMs / d.defragMs)),
      2,
    ),
    leaderMoveGapMs: summary(
      results.flatMap((r) => (r.leaderMoveGapMs === undefined ? [] : [r.leaderMoveGapMs])),
    ),
    overallGapMs: summary(results.map((r) => r.overallGapMs)),
    lostWrites: results.reduce((n, r) => n + r.lost, 0),
    acknowledgedWrites: results.reduce((n, r) => n + r.acknowledged, 0),
    goal: { gapOverDefragAtMost: 1, leaderMoveGapMsAtMost: LEADER_MOVE_GOAL_MS },
    samples: results,
    load: load(),
  };
  console.log(JSON.stringify(result));
  if (values.save) progress(`saved ${saveResults("defrag", "defrag", "", [result])}`);
} finally {
  keepLogs(cluster.dir, progress);
  await worker.kill("SIGKILL");
  await cluster.stop();
}

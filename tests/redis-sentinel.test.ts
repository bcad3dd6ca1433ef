// End-to-end: the operator on a Redis Sentinel group (Debian's redis-server and redis-sentinel:
// one primary, two replicas, three sentinels) loses the primary to SIGKILL in the middle of a
// scale and in the middle of a backup. The sentinels promote a replica, the operator's processes
// follow it by themselves, and both finish: no step of a cluster ran in two workers at once (the
// per-cluster lease is on the replicas before a step starts), no acknowledged etcd write is lost,
// and the backup in the store is whole.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Etcd3 } from "etcd3";
import t from "tap";
import { waitFor } from "../infra/local/kube-wait.ts";
import { startSentinelGroup } from "../infra/local/redis-sentinel.ts";
import { listMembers } from "../shared/etcd-members.ts";
import { bytesOf, s3SuiteStore } from "./helpers/backup-suite.ts";
import {
  awsSecretData,
  createBackup,
  createSecret,
  eventsOf,
  fillKeyspace,
  startClusterWithStore,
  waitBackupOutcome,
} from "./helpers/backups.ts";
import { createCluster, memberEndpoints, patchSpec, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { missingWrites, startWriter } from "./helpers/writer.ts";

const NS = "default";
const BUCKET = "backups";
const {
  local,
  store,
  clients: c,
} = await startClusterWithStore({ name: "e2e-sentinel", bucket: BUCKET, redis: false }, (stop) =>
  t.teardown(stop),
);
const group = await startSentinelGroup({ dir: join(local.dir, "redis-sentinel"), failoverAfterMs: 1_000 });
t.teardown(() => group.stop());
const s3 = s3SuiteStore(store, BUCKET);
t.teardown(() => s3.store.close());
await createSecret(c, NS, "aws", awsSecretData(store));

const SENTINEL_ENV = {
  REDIS_SENTINELS: group.sentinelsEnv,
  REDIS_SENTINEL_MASTER: group.masterName,
};
// Two workers, so that a job handed on during the failover can land in another process.
const processes: OperatorProcess[] = ["watcher", "scheduler", "worker", "worker"].map((role) =>
  startOperatorProcess(local, role, SENTINEL_ENV),
);
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});
const workers = processes.filter((p) => p.role === "worker");

interface LogLine {
  time: number;
  msg?: string;
  cluster?: string;
  backup?: string;
  job?: string;
  step?: string;
}

function logLines(p: OperatorProcess): LogLine[] {
  return readFileSync(p.logFile, "utf8")
    .split("\n")
    .flatMap((line) => {
      try {
        const parsed: unknown = JSON.parse(line);
        return typeof parsed === "object" && parsed !== null ? [parsed as LogLine] : [];
      } catch {
        return [];
      }
    });
}

/**
 * Each worker's steps of a cluster as [start, end] times: from "step starting" to the line that
 * ends the same job's reconcile in the same process ("step done", a lost lease, a block, or the
 * job failing, which BullMQ logs without the cluster). A step still open at the end of the log
 * counts as running until now.
 */
function stepIntervals(p: OperatorProcess, cluster: string): [number, number][] {
  const intervals: [number, number][] = [];
  let open: { time: number; job?: string } | undefined;
  const ends = /^(step done|lease lost|reconcile blocked|reconcile job failed)/;
  for (const line of logLines(p)) {
    if (line.cluster === cluster && line.msg === "step starting") {
      if (open) intervals.push([open.time, line.time]);
      open = { time: line.time, job: line.job };
    } else if (open && line.job === open.job && line.msg !== undefined && ends.test(line.msg)) {
      intervals.push([open.time, line.time]);
      open = undefined;
    }
  }
  if (open) intervals.push([open.time, Date.now()]);
  return intervals;
}

/** Pairs of steps of one cluster that ran in two worker processes at the same time. */
function overlappingSteps(cluster: string): string[] {
  const [first, second] = workers.map((w) => stepIntervals(w, cluster));
  const overlaps: string[] = [];
  for (const a of first ?? []) {
    for (const b of second ?? []) {
      if (a[0] < b[1] && b[0] < a[1]) overlaps.push(`${JSON.stringify(a)} and ${JSON.stringify(b)}`);
    }
  }
  return overlaps;
}

async function waitForLog(what: string, matches: (line: LogLine) => boolean, timeoutMs = 60_000) {
  return waitFor(
    what,
    async () => {
      for (const w of workers) if (logLines(w).some(matches)) return true;
      return undefined;
    },
    { timeoutMs, intervalMs: 50 },
  );
}

t.test("the operator runs on the Sentinel group", async (t) => {
  await createCluster(c, NS, "scaled", { size: 3 });
  await waitReady(c, NS, "scaled", 3, 90_000);
  t.pass("a 3-member cluster came up through the Sentinel group's primary");
});

t.test("the primary killed during a scale: a replica is promoted and the scale finishes", async (t) => {
  const writer = startWriter(() => memberEndpoints(c, NS, "scaled"), "scale-", { intervalMs: 20 });
  await sleep(500);
  const scaleStarted = Date.now();
  await patchSpec(c, NS, "scaled", { size: 5 });
  // Kill at the first member added, so the second is still to come when the primary is gone.
  await waitForLog(
    "the first member to be added",
    (line) => line.cluster === `${NS}/scaled` && line.time >= scaleStarted && line.step === "add-member",
  );
  const killedPort = await group.killPrimary();
  const killedAt = Date.now();
  const promoted = await group.awaitFailover(killedPort);
  const failoverMs = Date.now() - killedAt;
  t.not(promoted, killedPort, `the sentinels promoted the replica on ${promoted} (${failoverMs} ms)`);
  await waitReady(c, NS, "scaled", 5, 120_000);
  t.pass(`5 members Ready ${Date.now() - scaleStarted} ms after the scale began, without a hand`);
  const scheduler = processes.find((p) => p.role === "scheduler");
  const resynced = scheduler
    ? logLines(scheduler).find(
        (line) => line.time >= killedAt && line.msg?.startsWith("Redis restarted or failed over"),
      )
    : undefined;
  t.ok(resynced, "the scheduler saw the promoted replica and made sure of every cluster's job");
  const result = await writer.stop();
  const endpoints = await memberEndpoints(c, NS, "scaled");
  const members = await listMembers(endpoints, { timeoutMs: 3_000 });
  t.equal(members.length, 5, "etcd has 5 members");
  t.equal(new Set(members.map((m) => m.name)).size, 5, "with 5 different names");
  t.ok(
    members.every((m) => !m.isLearner && m.name !== ""),
    "every member started and promoted (no half-added member left behind)",
  );
  const added = (await eventsOf(c, NS, "EtcdCluster", "scaled")).filter((e) => e.reason === "MemberAdded");
  t.equal(added.length, 2, `two MemberAdded Events for 3 → 5: ${added.map((e) => e.message).join("; ")}`);
  t.same(overlappingSteps(`${NS}/scaled`), [], "no step of the cluster ran in both workers at once");
  t.ok(result.acknowledged.length > 50, `${result.acknowledged.length} writes acknowledged meanwhile`);
  t.same(await missingWrites(endpoints, result.acknowledged), [], "and every one reads back");
  await group.restart(killedPort);
});

t.test("the primary killed during a backup: the backup finishes once and is whole", async (t) => {
  await createCluster(c, NS, "saved", { size: 1 });
  await waitReady(c, NS, "saved", 1, 90_000);
  const client = new Etcd3({ hosts: await memberEndpoints(c, NS, "saved") });
  // Enough data that the backup streams for a while: the primary dies while it runs.
  await fillKeyspace(client, 256 * 1024 * 1024);
  client.close();
  const started = Date.now();
  await createBackup(c, NS, "saved-once", {
    etcdEndpoints: ["http://saved-client:2379"],
    storageType: "S3",
    s3: s3.section("saved/etcd.backup"),
  });
  await waitForLog("the backup to start", (line) => line.msg === "backup started" && line.time >= started);
  const killedPort = await group.killPrimary();
  const promoted = await group.awaitFailover(killedPort);
  t.not(promoted, killedPort, `the sentinels promoted the replica on ${promoted}`);
  const status = await waitBackupOutcome(c, NS, "saved-once", { since: started, timeoutMs: 180_000 });
  t.equal(status.succeeded, true, `the backup succeeded (${status.reason ?? ""})`);
  const object = await bytesOf(s3.store, "saved/etcd.backup");
  t.equal(
    createHash("sha256").update(object).digest("hex"),
    status.sha256,
    "the object in the store has the SHA-256 the status records",
  );
  const runs = workers.flatMap((w) =>
    logLines(w).filter((line) => line.msg === "backup started" && line.time >= started),
  );
  t.equal(runs.length, 1, "the backup ran once");
  await group.restart(killedPort);
});

// The schedule guard against a real Redis: it installs the resync, rebuilds after a wipe, resyncs
// when Redis restarted (a new process may have lost the writes after its last fsync), a scheduler
// that started after the restart too, leaves a steady Redis alone, and falls back to a resync every look interval where INFO is refused (a
// server that does not say who it is).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { pino } from "pino";
import t from "tap";
import { stopDaemon } from "../infra/local/daemons.ts";
import { waitFor } from "../infra/local/kube-wait.ts";
import { startRedis } from "../infra/local/redis.ts";
import { guardSchedules, redisIdentity, SCHEDULE_MARKER } from "../infra/scheduler.ts";
import { loadConfig } from "../shared/config.ts";
import { RECONCILE_QUEUE, RESYNC_SCHEDULER } from "../shared/queue.ts";

const dir = mkdtempSync(join(tmpdir(), "eop-schedule-guard-"));
const redisFiles = { dir, logFile: join(dir, "redis.log"), pidFile: join(dir, "redis.pid") };
let server = await startRedis(redisFiles);
const config = loadConfig({ RECONCILE_INTERVAL_MS: "500", FULL_LOOK_INTERVAL_MS: "300000" });
const messages: string[] = [];
const log = pino(
  { level: "info" },
  new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split("\n"))
        if (line) messages.push(String((JSON.parse(line) as { msg?: unknown }).msg));
      done();
    },
  }),
);
const connections: Redis[] = [];
const queues: Queue[] = [];
function connect(options: { username?: string; password?: string } = {}): Redis {
  const redis = new Redis(server.url, { maxRetriesPerRequest: null, ...options });
  connections.push(redis);
  return redis;
}
function newQueue(): Queue {
  const queue = new Queue(RECONCILE_QUEUE, { connection: connect() });
  queues.push(queue);
  return queue;
}
/** Restarts Redis on its port with its data on disk (the AOF rewritten first), as a restart keeps it. */
async function restartRedis(redis: Redis): Promise<void> {
  await redis.call("BGREWRITEAOF");
  await sleep(500);
  await stopDaemon(server.record);
  server = await startRedis({ ...redisFiles, port: server.port });
}
t.teardown(async () => {
  for (const queue of queues) await queue.close();
  for (const redis of connections) redis.disconnect();
  await stopDaemon(server.record);
  rmSync(dir, { recursive: true, force: true });
});

t.test("a steady Redis is left alone; a restarted one gets every cluster's job again", async (t) => {
  const redis = connect();
  const queue = newQueue();
  let resyncs = 0;
  const guard = await guardSchedules(queue, redis, config, async () => ++resyncs, log);
  t.teardown(() => guard.stop());
  t.equal(resyncs, 1, "a Redis without the marker is rebuilt at once");
  t.ok(messages.some((m) => m.startsWith("no queue state in Redis")));
  t.equal(
    (await queue.getJobScheduler(RESYNC_SCHEDULER))?.every,
    300_000,
    "Redis says who it is: the resync runs with the full looks",
  );
  const identity = await redisIdentity(redis);
  t.match(identity, /^[0-9a-f]{40}\/[0-9a-f]{40}$/, `its identity: run_id/master_replid (${identity})`);

  await sleep(2_000);
  t.equal(resyncs, 1, "four checks of a steady Redis: no resync");

  // A restart keeps the data (append-only file) but may have lost what came after its last fsync.
  await restartRedis(redis);
  t.equal(await redis.exists(SCHEDULE_MARKER), 1, "the marker survived the restart");
  await waitFor("the guard to resync after the restart", async () => (resyncs === 2 ? true : undefined), {
    timeoutMs: 10_000,
  });
  t.not(await redisIdentity(redis), identity, "a new process, a new identity");
  t.ok(
    messages.includes(
      "Redis restarted or failed over (writes may be lost); making sure every cluster has its job",
    ),
  );
  await sleep(1_500);
  t.equal(resyncs, 2, "once per restart");
});

t.test("a scheduler started anew tells a restart from the marker, not from its own memory", async (t) => {
  const redis = connect();
  const queue = newQueue();
  let resyncs = 0;
  const first = await guardSchedules(queue, redis, config, async () => ++resyncs, log);
  first.stop();
  t.equal(resyncs, 0, "a new scheduler on the Redis that took the last resync: none");
  t.equal(await redis.get(SCHEDULE_MARKER), await redisIdentity(redis), "the marker names that Redis");
  // The scheduler's pod goes with a lost node and Redis restarts (or fails over) before its
  // replacement runs: that one never saw the Redis before, yet writes may be lost.
  await restartRedis(redis);
  await waitFor("the connection back", async () =>
    (await redis.ping().catch(() => "")) === "PONG" ? true : undefined,
  );
  const second = await guardSchedules(queue, redis, config, async () => ++resyncs, log);
  t.teardown(() => second.stop());
  t.equal(resyncs, 1, "its first check resyncs");
  t.equal(await redis.get(SCHEDULE_MARKER), await redisIdentity(redis), "and marks the new Redis");
});

t.test("where Redis refuses INFO, the resync runs every look interval", async (t) => {
  const admin = connect();
  await admin.call("ACL", "SETUSER", "no-info", "on", ">secret", "~*", "&*", "+@all", "-info");
  const redis = connect({ username: "no-info", password: "secret" });
  t.equal(await redisIdentity(redis), undefined, "no identity");
  // BullMQ itself asks INFO for the server's version: only the guard's connection goes without.
  const queue = newQueue();
  await queue.removeJobScheduler(RESYNC_SCHEDULER);
  let resyncs = 0;
  const guard = await guardSchedules(queue, redis, config, async () => ++resyncs, log);
  t.teardown(() => guard.stop());
  t.equal((await queue.getJobScheduler(RESYNC_SCHEDULER))?.every, 500);
  await sleep(1_500);
  t.equal(resyncs, 0, "the marker is there and nothing changed that it can tell: no resync from the guard");
});

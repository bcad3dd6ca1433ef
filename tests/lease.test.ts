// The per-cluster lease and the one-job-per-cluster queue, against a real Redis.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import t from "tap";
import { stopDaemon } from "../infra/local/daemons.ts";
import { startRedis } from "../infra/local/redis.ts";
import { acquireLease, LeaseLostError, leaseKey } from "../shared/lease.ts";
import { dirtyKey, RECONCILE_QUEUE, reconcileJobId, requestReconcile } from "../shared/queue.ts";
import { FLOOR_TTL_MS, floorKey, isComparableVersion, raiseFloor } from "../shared/read-floor.ts";

const dir = mkdtempSync(join(tmpdir(), "eop-lease-"));
const server = await startRedis({ dir, logFile: join(dir, "redis.log"), pidFile: join(dir, "redis.pid") });
const redis = new Redis(server.url, { maxRetriesPerRequest: null });
t.teardown(async () => {
  redis.disconnect();
  await stopDaemon(server.record);
  rmSync(dir, { recursive: true, force: true });
});

t.test("only one holder at a time; the second learns how long to wait", async (t) => {
  const first = await acquireLease(redis, "ns/a", 2_000);
  t.ok("lease" in first, "first acquires");
  const second = await acquireLease(redis, "ns/a", 2_000);
  t.ok("heldForMs" in second && second.heldForMs > 0 && second.heldForMs <= 2_000, "second is told to wait");
  if ("lease" in first) {
    await first.lease.guard();
    await first.lease.release();
  }
  const third = await acquireLease(redis, "ns/a", 2_000);
  t.ok("lease" in third, "free again after release");
  if ("lease" in third) await third.lease.release();
});

t.test(
  "a holder that stops renewing (killed) loses the lease after its TTL, and its guard says so",
  async (t) => {
    const first = await acquireLease(redis, "ns/b", 600);
    if (!("lease" in first)) throw new Error("could not acquire");
    // Simulate a frozen or killed worker: its lease key expires and another worker takes over.
    await redis.pexpire(leaseKey("ns/b"), 1);
    await sleep(20);
    const second = await acquireLease(redis, "ns/b", 600);
    t.ok("lease" in second, "another worker takes over");
    await t.rejects(first.lease.guard(), LeaseLostError, "the old holder's guard refuses further changes");
    await first.lease.release();
    t.ok(await redis.exists(leaseKey("ns/b")), "releasing a lost lease does not delete the new holder's");
    if ("lease" in second) await second.lease.release();
  },
);

t.test("a renewing holder keeps the lease beyond its TTL", async (t) => {
  const held = await acquireLease(redis, "ns/c", 300);
  if (!("lease" in held)) throw new Error("could not acquire");
  await sleep(900);
  await held.lease.guard();
  t.ok("heldForMs" in (await acquireLease(redis, "ns/c", 300)), "still held after three TTLs");
  await held.lease.release();
});

t.test(
  "taking the lease clears the dirty mark and reads the floor; releasing it reports a new mark",
  async (t) => {
    const dirty = dirtyKey("ns", "keys");
    await redis.set(dirty, "1");
    await redis.set(floorKey("ns/keys"), "1234");
    const taken = await acquireLease(redis, "ns/keys", 2_000, {
      clear: dirty,
      read: floorKey("ns/keys"),
      check: dirty,
    });
    if (!("lease" in taken)) throw new Error("could not acquire");
    t.equal(taken.read, "1234", "the floor is read with the lease");
    t.equal(await redis.exists(dirty), 0, "the dirty mark is cleared with the lease");
    const refused = await acquireLease(redis, "ns/keys", 2_000, { clear: dirty, read: floorKey("ns/keys") });
    t.ok("heldForMs" in refused && refused.heldForMs > 0, "a second taker is refused with the time left");
    await redis.set(dirty, "1");
    t.equal(await redis.exists(dirty), 1, "a refused taker clears nothing");
    t.equal(await taken.lease.release(), true, "release reports the mark set meanwhile");
    t.equal(await redis.exists(leaseKey("ns/keys")), 0, "and the lease is gone");
    const again = await acquireLease(redis, "ns/keys", 2_000, { clear: dirty, check: dirty });
    if (!("lease" in again)) throw new Error("could not acquire");
    t.equal(again.read, undefined, "nothing read when no key is given");
    t.equal(await again.lease.release(), false, "no mark, nothing to look at again");
    const plain = await acquireLease(redis, "ns/keys", 2_000);
    if (!("lease" in plain)) throw new Error("could not acquire");
    t.equal(await plain.lease.release(), false, "without a check key release reports false");
  },
);

t.test("a reclaiming holder takes back a lease Redis lost, never one another worker took", async (t) => {
  const plain = await acquireLease(redis, "ns/lost", 2_000);
  const reclaiming = await acquireLease(redis, "ns/kept", 2_000, {}, { reclaim: true });
  if (!("lease" in plain) || !("lease" in reclaiming)) throw new Error("could not acquire");
  // What a Redis that lost its data (a wipe, a failover before replication) looks like.
  await redis.del(leaseKey("ns/lost"), leaseKey("ns/kept"));
  await t.rejects(plain.lease.guard(), LeaseLostError, "a plain holder's guard refuses");
  await reclaiming.lease.guard();
  t.ok(await redis.exists(leaseKey("ns/kept")), "a reclaiming holder's guard passes and holds the key again");
  t.ok("heldForMs" in (await acquireLease(redis, "ns/kept", 2_000)), "so another taker is refused");
  await redis.del(leaseKey("ns/kept"));
  // Renewals come every TTL/3 (~670 ms); a loaded machine may delay one.
  let back = 0;
  for (let i = 0; i < 50 && back === 0; i++) {
    await sleep(100);
    back = await redis.exists(leaseKey("ns/kept"));
  }
  t.equal(back, 1, "its renewal takes it back too");
  await redis.del(leaseKey("ns/kept"));
  const other = await acquireLease(redis, "ns/kept", 2_000);
  if (!("lease" in other)) throw new Error("could not acquire");
  await t.rejects(reclaiming.lease.guard(), LeaseLostError, "once another worker took it, the guard refuses");
  await reclaiming.lease.release();
  await other.lease.guard();
  await other.lease.release();
  await plain.lease.release();
});

t.test("a guard asked while Redis does not answer waits for its answer, up to a TTL", async (t) => {
  const own = join(dir, "restarting");
  const options = { dir: own, logFile: join(dir, "restarting.log"), pidFile: join(dir, "restarting.pid") };
  let server = await startRedis(options);
  // maxRetriesPerRequest 0: a command sent while the connection is down fails at once, as one in
  // flight fails when a failover closes the connection.
  const client = new Redis(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => 100 });
  client.on("error", () => {});
  t.teardown(async () => {
    client.disconnect();
    await stopDaemon(server.record, 0);
  });
  const held = await acquireLease(client, "ns/restart", 10_000);
  if (!("lease" in held)) throw new Error("could not acquire");
  await stopDaemon(server.record);
  const guarded = held.lease.guard().then(
    () => "confirmed",
    (error: unknown) => `refused: ${String(error)}`,
  );
  await sleep(1_000);
  await t.rejects(client.get("any"), "meanwhile a command fails at once");
  server = await startRedis({ ...options, port: server.port });
  t.equal(
    await guarded,
    "confirmed",
    "the guard passes once Redis is back with the lease (its append-only file)",
  );
  await held.lease.release();

  const short = await acquireLease(client, "ns/gone", 1_000);
  if (!("lease" in short)) throw new Error("could not acquire");
  await stopDaemon(server.record, 0);
  const error = await short.lease.guard().then(
    () => undefined,
    (e: unknown) => e,
  );
  t.ok(
    error instanceof Error && !(error instanceof LeaseLostError),
    "with Redis gone for a whole TTL the guard fails",
  );
  t.match(String(error), /did not confirm the lease on ns\/gone within 1000 ms/, "saying so");
  await short.lease.release();
});

t.test("the read floor only rises, and only holds plain revisions", async (t) => {
  const key = floorKey("ns/floor");
  await raiseFloor(redis, "ns/floor", "99");
  t.equal(await redis.get(key), "99");
  await raiseFloor(redis, "ns/floor", "100");
  t.equal(await redis.get(key), "100", "a longer number is newer");
  await raiseFloor(redis, "ns/floor", "99");
  t.equal(await redis.get(key), "100", "an older version does not lower it");
  await raiseFloor(redis, "ns/floor", "100");
  await raiseFloor(redis, "ns/floor", "101");
  t.equal(await redis.get(key), "101", "same length compares as digits");
  await raiseFloor(redis, "ns/floor", "abc");
  await raiseFloor(redis, "ns/floor", "0102");
  await raiseFloor(redis, "ns/floor", undefined);
  t.equal(await redis.get(key), "101", "anything but a plain decimal is ignored");
  const ttl = await redis.pttl(key);
  t.ok(ttl > FLOOR_TTL_MS - 60_000 && ttl <= FLOOR_TTL_MS, "the floor expires after an hour unless raised");
  t.notOk(isComparableVersion("0"), "0 means any version to the API server, never a floor");
  t.ok(isComparableVersion("18446744073709551615"), "a uint64 is a version");
});

t.test(
  "requests for one cluster collapse into one job; a delayed job is promoted; a running one is marked dirty",
  async (t) => {
    const queue = new Queue(RECONCILE_QUEUE, { connection: redis, prefix: "lease-test" });
    t.teardown(() => queue.close());
    await requestReconcile(queue, redis, "ns", "one");
    await requestReconcile(queue, redis, "ns", "one");
    await requestReconcile(queue, redis, "ns", "two");
    t.equal(await queue.count(), 2, "two clusters, two jobs");
    await queue.remove(reconcileJobId("ns", "one"));
    await requestReconcile(queue, redis, "ns", "one", { delayMs: 60_000 });
    t.equal(await queue.getJobState(reconcileJobId("ns", "one")), "delayed");
    await requestReconcile(queue, redis, "ns", "one");
    t.equal(
      await queue.getJobState(reconcileJobId("ns", "one")),
      "waiting",
      "an event promotes the delayed job",
    );
    t.equal(await redis.get(dirtyKey("ns", "one")), "1", "and marks the cluster dirty for a step in flight");
  },
);

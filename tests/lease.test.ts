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

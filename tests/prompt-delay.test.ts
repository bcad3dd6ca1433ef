// A worker's short delays are promoted by its own timer, against a real Redis at the hz the project
// runs it at (1): no worker is blocked on the queue here, so nothing but that timer can promote.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type Job, Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import t from "tap";
import { stopDaemon } from "../infra/local/daemons.ts";
import { waitFor } from "../infra/local/kube-wait.ts";
import { startRedis } from "../infra/local/redis.ts";
import { PROMPT_DELAY_MAX_MS, promptDelays } from "../shared/prompt-delay.ts";

const dir = mkdtempSync(join(tmpdir(), "eop-prompt-delay-"));
const server = await startRedis({ dir, logFile: join(dir, "redis.log"), pidFile: join(dir, "redis.pid") });
const connection = new Redis(server.url, { maxRetriesPerRequest: null });
const queue = new Queue("prompt-delay", { connection });
// Not run: jobs are taken by hand (getNextJob), so no blocked worker promotes anything.
const worker = new Worker("prompt-delay", null, { connection, autorun: false });
t.teardown(async () => {
  await worker.close();
  await queue.close();
  connection.disconnect();
  await stopDaemon(server.record);
  rmSync(dir, { recursive: true, force: true });
});

t.test("the project's Redis runs at 1 Hz", async (t) => {
  const hz = (await connection.config("GET", "hz")) as string[];
  t.same(hz, ["hz", "1"]);
});

/** Adds a job and takes it as a worker does: active, with its lock token. */
async function activeJob(name: string): Promise<{ job: Job; token: string }> {
  await queue.add(name, {}, { jobId: name });
  const token = `token-${name}`;
  const job = await worker.getNextJob(token);
  if (!job) throw new Error(`no job ${name} to take`);
  return { job, token };
}

t.test("a short delay is promoted when due by the timer of the process that set it", async (t) => {
  const delays = promptDelays();
  const { job, token } = await activeJob("short");
  await delays.delay(job, token, 200);
  t.equal(await queue.getJobState("short"), "delayed", "delayed at first");
  t.equal(delays.armed(), 1, "a timer is armed");
  const state = await waitFor(
    "the job to be promoted",
    async () => {
      const now = await queue.getJobState("short");
      return now === "delayed" ? undefined : now;
    },
    { timeoutMs: 10_000, intervalMs: 50 },
  );
  t.equal(state, "waiting", "waiting: a worker takes it at once");
  t.equal(delays.armed(), 0, "the timer is gone");
  await queue.remove("short").catch(() => undefined);
});

t.test("a long delay is left to Redis", async (t) => {
  const delays = promptDelays();
  const { job, token } = await activeJob("long");
  await delays.delay(job, token, PROMPT_DELAY_MAX_MS + 1);
  t.equal(delays.armed(), 0, "no timer");
  t.equal(await queue.getJobState("long"), "delayed");
  await queue.remove("long");
});

t.test("a newer delay of the same job replaces the timer an earlier one armed", async (t) => {
  const delays = promptDelays();
  const first = await activeJob("again");
  await delays.delay(first.job, first.token, 300);
  // Promoted early (as an event does), taken again, and this time delayed for long.
  await first.job.promote();
  const token = "token-again-2";
  const job = await worker.getNextJob(token);
  t.equal(job?.id, "again", "taken again");
  if (job) await delays.delay(job, token, 60_000);
  t.equal(delays.armed(), 0, "the short delay's timer is disarmed");
  await sleep(600);
  t.equal(await queue.getJobState("again"), "delayed", "still delayed past the first delay's time");
  await queue.remove("again");
});

t.test("close() disarms every timer", async (t) => {
  const delays = promptDelays();
  const { job, token } = await activeJob("closed");
  await delays.delay(job, token, 300);
  delays.close();
  t.equal(delays.armed(), 0);
  await sleep(600);
  t.equal(await queue.getJobState("closed"), "delayed", "not promoted after close");
  await queue.remove("closed");
});

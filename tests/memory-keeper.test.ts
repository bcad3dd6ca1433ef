// The memory keeper: when it starts a major collection (only after the heap and Buffers grew by the
// threshold, never two at once), what it does without --expose-gc, and, in a real node process
// started with the operator's flags, that it frees dead Buffers V8 would have kept. Then its
// malloc_trim: when it trims, and that the real addon gives freed pages back to the system.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import t from "tap";
import { holdCollections, type MemoryUse, startMemoryKeeper } from "../infra/memory-keeper.ts";
import { buildMallocTrimAddon } from "../infra/native/build.ts";
import { OPERATOR_ENV, OPERATOR_NODE_FLAGS } from "../infra/operator.ts";

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test("collects once the heap and Buffers grew by the threshold, and not before", async (t) => {
  let use: MemoryUse = { heapUsed: 40 * MiB, arrayBuffers: 2 * MiB };
  const collected: [MemoryUse, MemoryUse][] = [];
  const keeper = startMemoryKeeper({
    intervalMs: 10,
    growthBytes: 8 * MiB,
    usage: () => use,
    collect: async () => {
      use = { heapUsed: 41 * MiB, arrayBuffers: 1 * MiB };
    },
    onCollected: (before, after) => collected.push([before, after]),
  });
  t.teardown(() => keeper.stop());
  use = { heapUsed: 45 * MiB, arrayBuffers: 4 * MiB }; // +7 MiB: below the threshold
  await sleep(60);
  t.equal(keeper.collections, 0, "7 MiB of growth is not enough");
  use = { heapUsed: 46 * MiB, arrayBuffers: 5 * MiB }; // +9 MiB
  await sleep(60);
  t.equal(keeper.collections, 1, "9 MiB of growth starts one collection");
  t.same(collected[0]?.[1], { heapUsed: 41 * MiB, arrayBuffers: 1 * MiB }, "told the use after it");
  // The baseline is now the use after the collection (42 MiB): 49 is +7 again.
  use = { heapUsed: 45 * MiB, arrayBuffers: 4 * MiB };
  await sleep(60);
  t.equal(keeper.collections, 1, "growth is counted from the last collection's result");
});

t.test("counts growth from the lowest use since the last collection (V8 sweeps Buffers later)", async (t) => {
  let use: MemoryUse = { heapUsed: 40 * MiB, arrayBuffers: 0 };
  const keeper = startMemoryKeeper({
    intervalMs: 10,
    growthBytes: 8 * MiB,
    usage: () => use,
    // Right after the collection the dead Buffers are still counted: they are freed in the background.
    collect: async () => {
      use = { heapUsed: 40 * MiB, arrayBuffers: 20 * MiB };
    },
  });
  t.teardown(() => keeper.stop());
  use = { heapUsed: 40 * MiB, arrayBuffers: 30 * MiB };
  await sleep(60);
  t.equal(keeper.collections, 1, "30 MiB of growth starts one collection");
  use = { heapUsed: 40 * MiB, arrayBuffers: 1 * MiB }; // the sweeper freed them
  await sleep(60);
  use = { heapUsed: 40 * MiB, arrayBuffers: 10 * MiB }; // +9 over the low-water mark, -10 from what collect() left
  await sleep(60);
  t.equal(keeper.collections, 2, "9 MiB over the lowest use since starts the next one");
});

t.test("never starts a collection while one is still running", async (t) => {
  let finish: () => void = () => {};
  let use: MemoryUse = { heapUsed: 10 * MiB, arrayBuffers: 0 };
  const keeper = startMemoryKeeper({
    intervalMs: 5,
    growthBytes: 1 * MiB,
    usage: () => use,
    collect: () =>
      new Promise<void>((resolve) => {
        finish = resolve;
      }),
  });
  t.teardown(() => keeper.stop());
  use = { heapUsed: 50 * MiB, arrayBuffers: 0 };
  await sleep(60);
  t.equal(keeper.collections, 1, "one collection over twelve looks while it runs");
  finish();
  await sleep(30);
  t.equal(keeper.collections, 1, "nothing grew since it finished");
  use = { heapUsed: 52 * MiB, arrayBuffers: 0 };
  await sleep(30);
  t.equal(keeper.collections, 2, "growth after it starts the next");
});

t.test("holds off while a stream holds it, and collects once the last hold is released", async (t) => {
  let use: MemoryUse = { heapUsed: 10 * MiB, arrayBuffers: 0 };
  const keeper = startMemoryKeeper({
    intervalMs: 5,
    growthBytes: 1 * MiB,
    usage: () => use,
    collect: async () => {
      use = { heapUsed: 10 * MiB, arrayBuffers: 0 };
    },
  });
  t.teardown(() => keeper.stop());
  const backup = holdCollections();
  const restore = holdCollections();
  use = { heapUsed: 10 * MiB, arrayBuffers: 300 * MiB };
  await sleep(40);
  t.equal(keeper.collections, 0, "nothing while two streams run");
  backup();
  backup(); // a second release of the same hold changes nothing
  await sleep(40);
  t.equal(keeper.collections, 0, "nothing while one still runs");
  restore();
  await sleep(40);
  t.equal(keeper.collections, 1, "the stream's leftovers are collected once it is done");
});

t.test("without a way to collect it says so once and does nothing; interval 0 is off", async (t) => {
  let told = 0;
  const off = startMemoryKeeper({ intervalMs: 0, growthBytes: 1, onUnavailable: () => told++ });
  t.equal(off.collections, 0);
  t.equal(told, 0, "interval 0 is a choice, not a problem");
  // This test process runs without --expose-gc.
  t.equal(globalThis.gc, undefined, "tap runs tests without --expose-gc");
  const unavailable = startMemoryKeeper({ intervalMs: 5, growthBytes: 1, onUnavailable: () => told++ });
  await sleep(30);
  t.equal(told, 1);
  t.equal(unavailable.collections, 0);
  unavailable.stop();
});

t.test("in node with the operator's flags it frees dead Buffers that V8 kept", async (t) => {
  // Buffers dropped after a while pile up until a major collection; the child reports the memory
  // behind them after the same churn with the keeper off and with it on.
  const script = `
    const { startMemoryKeeper } = await import(${JSON.stringify(new URL("../infra/memory-keeper.ts", import.meta.url).href)});
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    async function churn() {
      let held = [];
      for (let i = 0; i < 400; i++) {
        held.push(Buffer.alloc(64 * 1024, i));
        if (held.length > 16) held = [];
        await sleep(1);
      }
      await sleep(200);
      return process.memoryUsage().arrayBuffers;
    }
    const off = await churn();
    const keeper = startMemoryKeeper({ intervalMs: 20, growthBytes: 2 * 1024 * 1024 });
    const on = await churn();
    keeper.stop();
    console.log(JSON.stringify({ off, on, collections: keeper.collections }));
  `;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [...OPERATOR_NODE_FLAGS, "--input-type=module", "-e", script],
    { timeout: 60_000 },
  );
  const result = JSON.parse(stdout) as { off: number; on: number; collections: number };
  t.comment(
    `Buffers' memory after 25 MiB of churn: ${(result.off / MiB).toFixed(1)} MiB without the keeper, ${(result.on / MiB).toFixed(1)} MiB with it (${result.collections} collections)`,
  );
  t.ok(result.collections > 0, "the keeper collected");
  t.ok(result.on < result.off / 2, "less than half the Buffers' memory stays with the keeper on");
});

/** A malloc whose free bytes the test sets; trim() leaves `keepsFree` of them (pages still in use). */
function fakeMalloc(free: number, keepsFree = 0) {
  const malloc = {
    free,
    trimCalls: 0,
    trimmer: {
      freeBytes: () => malloc.free,
      trim: () => {
        malloc.trimCalls++;
        malloc.free = keepsFree;
        return true;
      },
    },
  };
  return malloc;
}

t.test("trims once malloc's free bytes grew by the threshold since the last trim", async (t) => {
  const malloc = fakeMalloc(10 * MiB, 6 * MiB);
  const trimmed: [number, number][] = [];
  const keeper = startMemoryKeeper({
    intervalMs: 10,
    growthBytes: 8 * MiB,
    usage: () => ({ heapUsed: 40 * MiB, arrayBuffers: 0 }),
    collect: async () => {},
    trimmer: malloc.trimmer,
    trimGrowthBytes: 4 * MiB,
    onTrimmed: (before, after) => trimmed.push([before, after]),
  });
  t.teardown(() => keeper.stop());
  malloc.free = 13 * MiB; // +3 MiB
  await sleep(60);
  t.equal(keeper.trims, 0, "3 MiB more free is not enough");
  malloc.free = 7 * MiB; // malloc reused some: the low-water mark is now 7
  await sleep(40);
  malloc.free = 11 * MiB; // +4 over the low-water mark, -2 from the start
  await sleep(60);
  t.equal(keeper.trims, 1, "4 MiB over the lowest free bytes since starts one trim");
  t.same(trimmed[0], [11 * MiB, 6 * MiB], "told the free bytes before and after");
  malloc.free = 9 * MiB; // +3 over what the trim left
  await sleep(60);
  t.equal(keeper.trims, 1, "growth is counted from what the trim left");
  const release = holdCollections();
  malloc.free = 20 * MiB;
  await sleep(60);
  t.equal(keeper.trims, 1, "no trim while a stream holds the keeper");
  release();
  await sleep(60);
  t.equal(keeper.trims, 2, "the stream's leftovers are trimmed once it is done");
  t.equal(keeper.collections, 0, "trims do not count as collections");
});

t.test("trims without --expose-gc; trim growth 0 is off", async (t) => {
  t.equal(globalThis.gc, undefined, "tap runs tests without --expose-gc");
  let told = 0;
  const malloc = fakeMalloc(0);
  const trimming = startMemoryKeeper({
    intervalMs: 10,
    growthBytes: MiB,
    trimmer: malloc.trimmer,
    trimGrowthBytes: MiB,
    onUnavailable: () => told++,
  });
  t.teardown(() => trimming.stop());
  malloc.free = 2 * MiB;
  await sleep(60);
  t.equal(told, 1, "it says collections are unavailable");
  t.equal(trimming.trims, 1, "and trims all the same");
  trimming.stop();

  const other = fakeMalloc(0);
  const off = startMemoryKeeper({
    intervalMs: 10,
    growthBytes: MiB,
    trimmer: other.trimmer,
    trimGrowthBytes: 0,
  });
  t.teardown(() => off.stop());
  other.free = 64 * MiB;
  await sleep(60);
  t.equal(other.trimCalls, 0, "trimGrowthBytes 0 never trims");
});

t.test("looks less often while nothing moves, and at its interval again once something does", async (t) => {
  let use: MemoryUse = { heapUsed: 40 * MiB, arrayBuffers: 0 };
  const looks: number[] = [];
  let collectedAt = 0;
  const keeper = startMemoryKeeper({
    intervalMs: 10,
    idleIntervalMs: 160,
    growthBytes: 8 * MiB,
    usage: () => {
      looks.push(performance.now());
      return use;
    },
    collect: async () => {},
    onCollected: () => {
      collectedAt = performance.now();
    },
  });
  t.teardown(() => keeper.stop());
  const quietFrom = performance.now();
  await sleep(600);
  const quiet = looks.filter((at) => at > quietFrom).length;
  // At its interval that is about 60 looks; backing off 10, 20, 40, 80, 160, 160, … about 7.
  t.ok(quiet <= 12, `quiet for 600 ms: ${quiet} looks`);
  use = { heapUsed: 49 * MiB, arrayBuffers: 0 }; // +9 MiB: a collection at the next look
  await sleep(400); // the backed-off look is at most 160 ms away
  t.equal(keeper.collections, 1, "growth after a quiet time is collected at the next look");
  const after = looks.filter((at) => at > collectedAt && at <= collectedAt + 150).length;
  // After the collection: at 10, 30 and 70 ms (then 150); backed off, one at most.
  t.ok(after >= 3, `looking often again: ${after} looks in the 150 ms after the collection`);
});

t.test("the real malloc_trim hands the pages of freed Buffers back to the system", async (t) => {
  const addon = buildMallocTrimAddon();
  if (addon.path === undefined) {
    t.fail(`the addon did not build: ${addon.reason}`);
    return;
  }
  // 64 MiB of 16 KiB Buffers (malloc'd, below its mmap threshold), every 16th kept: free() cannot
  // give the holes back from the arena's top, so only malloc_trim can.
  const script = `
    const { loadMallocTrimmer } = await import(${JSON.stringify(new URL("../infra/malloc-trim.ts", import.meta.url).href)});
    const loaded = loadMallocTrimmer(${JSON.stringify(addon.path)});
    if (!("trimmer" in loaded)) throw new Error(loaded.reason);
    const { trimmer } = loaded;
    const rss = () => Number(/VmRSS:\\s+(\\d+)/.exec(require("node:fs").readFileSync("/proc/self/status", "utf8"))[1]) * 1024;
    let buffers = [];
    for (let i = 0; i < 4096; i++) buffers.push(Buffer.allocUnsafeSlow(16 * 1024).fill(i));
    const kept = buffers.filter((_, i) => i % 16 === 15);
    buffers = [];
    for (let i = 0; i < 5; i++) { gc(); await new Promise((r) => setTimeout(r, 50)); }
    const before = { rss: rss(), free: trimmer.freeBytes() };
    const released = trimmer.trim();
    const after = { rss: rss(), free: trimmer.freeBytes() };
    console.log(JSON.stringify({ before, after, released, kept: kept.length }));
  `;
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [
      ...OPERATOR_NODE_FLAGS,
      "--input-type=module",
      "-e",
      `import { createRequire } from "node:module"; const require = createRequire(import.meta.url); ${script}`,
    ],
    { timeout: 60_000, env: { ...process.env, ...OPERATOR_ENV, NODE_OPTIONS: "" } },
  );
  const result = JSON.parse(stdout) as {
    before: { rss: number; free: number };
    after: { rss: number; free: number };
    released: boolean;
  };
  const released = result.before.rss - result.after.rss;
  t.comment(
    `malloc held ${(result.before.free / MiB).toFixed(1)} MiB free; malloc_trim took RSS from ${(result.before.rss / MiB).toFixed(1)} to ${(result.after.rss / MiB).toFixed(1)} MiB`,
  );
  t.ok(result.before.free > 48 * MiB, "the freed Buffers sit in malloc's free chunks");
  t.equal(result.released, true, "malloc_trim says it gave memory back");
  t.ok(released > 32 * MiB, `RSS fell by more than 32 MiB (${(released / MiB).toFixed(1)})`);
});

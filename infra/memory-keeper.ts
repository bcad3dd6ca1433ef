// Keeps a busy operator process's memory near what it actually uses.
//
// V8 collects its old generation only when that grows past a limit it derives from the live size,
// and it frees the memory behind Buffers (socket reads, HTTP and Redis replies) that lived long
// enough to be promoted only at such a collection, or once 64 MiB more of it has piled up. A worker
// doing hundreds of reconciles a second therefore carries tens of MiB of dead objects and Buffers:
// in bench/control.ts a worker's heap was 89 MiB with 44–67 MiB live and 27–70 MiB of Buffers of
// which ~1 MiB was live. A major collection started from here every couple of seconds, only when
// the heap and Buffers grew since the last one, keeps RSS close to the live size (bench/control.ts:
// workers 168 MiB instead of 217–225).
//
// The price is a pause. `execution: "async"` only posts the collection as a task: it still runs as
// one atomic mark-compact on the main thread, 56–116 ms on the loaded 2-core bench machine
// (--trace-gc: "testing; GC in old space requested"), where V8's own incremental collections
// finalise in 6–20 ms. With two workers the other one takes the jobs meanwhile: of six such
// pauses in one control run, one fell inside a burst of slow queue waits. The alternative
// measured, V8's --heap-growing-percent=25 with the keeper off, kept RSS as low and the pauses
// short in one session and not in the next, and tripled the worker's CPU during a backup (a
// mark-compact every ~100 ms: 11 CPU-s instead of 4–5 for 1.2 GiB).
//
// Needs node's --expose-gc (OPERATOR_NODE_FLAGS); without it the keeper says so once and does
// not collect, which costs memory, not correctness.
//
// It also hands malloc's free pages back to the system (malloc_trim, infra/malloc-trim.ts) once
// malloc's free chunks grew by trimGrowthBytes since the last trim: what a collection frees behind
// Buffers goes back to malloc, not to the system. bench/control.ts workers: ~2 ms per trim (at
// most 9.3), 7–9 trims per run.
//
// Not while GiBs stream through the process (a backup, a restore's check): there V8's own
// external-memory trigger collects the stream's Buffers every 64 MiB anyway, and a forced
// collection in the middle of a stream only adds a mark-compact. Streams hold the keeper off with
// holdCollections(). (A forced collection also let V8 pretenure allocation sites that a stream
// later used heavily; OPERATOR_NODE_FLAGS turns pretenuring off, see there.)

import type { MallocTrimmer } from "./malloc-trim.ts";

export interface MemoryUse {
  heapUsed: number;
  /** Memory behind Buffers and ArrayBuffers (exact; V8's `external` is only updated by a GC). */
  arrayBuffers: number;
}

export type MajorCollection = () => Promise<void>;

export interface MemoryKeeperOptions {
  /** How often growth is looked at; at most one collection per interval. 0 turns the keeper off. */
  intervalMs: number;
  /**
   * While the process is quiet (a look found nothing to do and little moved since the one before),
   * each next look waits twice as long, up to this; any movement brings back intervalMs. Default
   * intervalMs: no backing off.
   */
  idleIntervalMs?: number;
  /** Growth of heap + Buffers since the last collection that makes the next look collect. */
  growthBytes: number;
  /** The collection; default: V8's `gc({ type: "major", execution: "async" })` when exposed. */
  collect?: MajorCollection;
  usage?: () => MemoryUse;
  /** Told once when there is no way to collect (node started without --expose-gc). */
  onUnavailable?: () => void;
  /** Told after each collection: the use before and after, and how long it took (ms). */
  onCollected?: (before: MemoryUse, after: MemoryUse, ms: number) => void;
  /** malloc_trim (infra/malloc-trim.ts); without it the keeper only collects. */
  trimmer?: MallocTrimmer;
  /** Growth of malloc's free bytes since the last trim that makes the next look trim; 0: never. */
  trimGrowthBytes?: number;
  /** Told after each trim: malloc's free bytes before and after, and how long it took (ms). */
  onTrimmed?: (freeBefore: number, freeAfter: number, ms: number) => void;
}

export interface MemoryKeeper {
  stop(): void;
  /** Collections started so far. */
  readonly collections: number;
  /** malloc_trim calls so far. */
  readonly trims: number;
}

/** Streams in progress in this process; the keeper waits while there is any. */
let holds = 0;

/**
 * Keeps the keeper from collecting until the returned release is called (once; later calls do
 * nothing). For work that streams GiBs through the process.
 */
export function holdCollections(): () => void {
  holds++;
  let released = false;
  return () => {
    if (released) return;
    released = true;
    holds--;
  };
}

function v8MajorCollection(): MajorCollection | undefined {
  const gc = globalThis.gc;
  if (!gc) return undefined;
  return () => gc({ type: "major", execution: "async" });
}

function currentUse(): MemoryUse {
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return { heapUsed, arrayBuffers };
}

const total = (use: MemoryUse) => use.heapUsed + use.arrayBuffers;

export function startMemoryKeeper(options: MemoryKeeperOptions): MemoryKeeper {
  const off = { stop() {}, collections: 0, trims: 0 };
  if (options.intervalMs <= 0) return off;
  const collect = options.collect ?? v8MajorCollection();
  if (!collect) options.onUnavailable?.();
  const trimGrowthBytes = options.trimGrowthBytes ?? 0;
  const trim = trimGrowthBytes > 0 ? options.trimmer : undefined;
  if (!collect && !trim) return off;
  const usage = options.usage ?? currentUse;
  let collections = 0;
  let trims = 0;
  let baseline = total(usage());
  let freeLow = trim?.freeBytes() ?? 0;
  let running = false;

  /** Whether the trim or collection rules moved since the look before (a quarter of a threshold). */
  let lastFree = freeLow;
  let lastTotal = baseline;
  function moved(free: number, now: number): boolean {
    const freeMoved = trimGrowthBytes > 0 && Math.abs(free - lastFree) >= trimGrowthBytes / 4;
    const useMoved = Math.abs(now - lastTotal) >= options.growthBytes / 4;
    lastFree = free;
    lastTotal = now;
    return freeMoved || useMoved;
  }

  function trimIfGrown(trimmer: MallocTrimmer): number {
    const free = trimmer.freeBytes();
    // The low-water mark, as for collections: malloc's free bytes also fall as it reuses them.
    freeLow = Math.min(freeLow, free);
    if (free - freeLow < trimGrowthBytes) return free;
    const started = performance.now();
    trimmer.trim();
    trims++;
    // malloc_trim hands back the pages inside free chunks, which stay free chunks: mallinfo's free
    // bytes barely fall (bench/control.ts: 34 → 34 MiB, 32 → 22). Growth is counted from there,
    // and from the low-water mark as malloc reuses (and touches again) those chunks.
    freeLow = trimmer.freeBytes();
    options.onTrimmed?.(free, freeLow, performance.now() - started);
    return freeLow;
  }

  function collectIfGrown(major: MajorCollection, before: MemoryUse): void {
    const now = total(before);
    // The low-water mark since the last collection: V8 frees a collection's dead ArrayBuffers on a
    // background thread, so the use read right after it can still count many of them, and growth
    // measured from that would need up to that much more before the next collection.
    baseline = Math.min(baseline, now);
    if (now - baseline < options.growthBytes) return;
    running = true;
    collections++;
    const started = performance.now();
    major().then(
      () => {
        const after = usage();
        baseline = total(after);
        running = false;
        options.onCollected?.(before, after, performance.now() - started);
      },
      () => {
        running = false;
      },
    );
  }

  // Each look costs (mallinfo2 walks malloc's free chunks, ~1 ms): at rest, every 2 s was 40 % of
  // an idle operator's CPU. Hence the backing off while nothing moves.
  const idleIntervalMs = Math.max(options.intervalMs, options.idleIntervalMs ?? options.intervalMs);
  let nextMs = options.intervalMs;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const look = () => {
    if (running || holds > 0) {
      nextMs = options.intervalMs;
    } else {
      const [trimsBefore, collectionsBefore] = [trims, collections];
      const free = trim ? trimIfGrown(trim) : 0;
      const use = usage();
      if (collect) collectIfGrown(collect, use);
      const acted = trims !== trimsBefore || collections !== collectionsBefore;
      const busy = moved(free, total(use)) || acted;
      nextMs = busy ? options.intervalMs : Math.min(nextMs * 2, idleIntervalMs);
    }
    if (!stopped) schedule();
  };
  const schedule = () => {
    timer = setTimeout(look, nextMs);
    // Never what keeps the process alive.
    timer.unref();
  };
  schedule();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
    get collections() {
      return collections;
    },
    get trims() {
      return trims;
    },
  };
}

// A Transform that, once piped into a corkable destination (an HTTP request, a socket), corks it
// for the rest of the event-loop turn in which it passes a chunk. The chunks one turn delivers
// then leave in one writev, uncopied, instead of one write(2) each.
//
// Why: a backup's snapshot arrives from etcd in HTTP/2 DATA frames of at most 16 KiB (grpc-go
// never sends larger ones), handed on as slices of those frames (etcd-snapshot-decoder.ts). Piped
// straight into the PutObject request, every slice was its own system call and, on loopback or a
// LAN, its own TCP segment and its own wake-up of the store. Measured beside a local etcd and the
// local S3 store, 1.2 GiB: the worker's system time 1.15–1.5 s → 0.75–0.87 s, the store's CPU
// 2.9–5.4 s → 1.8–3.3 s (the commit that made it has the runs).
// Memory stays bounded: the corked destination's write() reports back-pressure past its high-water
// mark, which pauses the pipe until the turn ends and the batch drains.
import { Transform } from "node:stream";

/** What cork() and uncork() are on: stream.Writable, and http.OutgoingMessage (not a Writable). */
interface Corkable {
  cork(): void;
  uncork(): void;
}

function isCorkable(destination: object): destination is Corkable {
  return (
    "cork" in destination &&
    typeof destination.cork === "function" &&
    "uncork" in destination &&
    typeof destination.uncork === "function"
  );
}

export class TurnBatchedTransform extends Transform {
  #destination: Corkable | undefined;
  #uncork: NodeJS.Immediate | undefined;
  /** How many batches left corked (what its test counts). */
  batches = 0;

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean }): T {
    // One destination is batched: the SDK pipes a request body once. Corked as each chunk leaves
    // (its 'data' event, before the pipe's own listener writes it), not as it is pushed: after
    // back-pressure the chunks waiting in this stream's buffer leave on a later turn, in a batch too.
    if (this.#destination === undefined && isCorkable(destination)) {
      this.#destination = destination;
      this.on("data", () => this.#corkForThisTurn());
    }
    return super.pipe(destination, options);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#uncorkNow();
    super._destroy(error, callback);
  }

  #corkForThisTurn(): void {
    const destination = this.#destination;
    if (destination === undefined || this.#uncork !== undefined) return;
    destination.cork();
    this.batches++;
    // setImmediate, not nextTick: the socket's read callbacks of one poll each run their own
    // nextTick queue, so only the check phase comes after all the chunks of a turn.
    this.#uncork = setImmediate(() => this.#uncorkNow());
  }

  #uncorkNow(): void {
    if (this.#uncork === undefined) return;
    clearImmediate(this.#uncork);
    this.#uncork = undefined;
    this.#destination?.uncork();
  }
}

// Holds back the last chunk of a stream until a check passes. An object store commits an upload
// only once its last byte arrives, so a backup run that lost its lease while it streamed (Redis lost
// its data, another run took over) fails here and never replaces the object the other run wrote.
import { Transform, type TransformCallback } from "node:stream";

/**
 * The stream's end was refused: its writer no longer owns the object. A store must then leave the
 * key alone (no clean-up of a broken upload there): whatever is at it is the other writer's.
 */
export class CommitRefusedError extends Error {
  override name = "CommitRefusedError";
}

export class CommitGate extends Transform {
  readonly #check: () => Promise<void>;
  #held: Buffer | undefined;
  /** The check's own error, once it refused: what the upload's failure (an abort) stems from. */
  refused: Error | undefined;

  constructor(check: () => Promise<void>) {
    super();
    this.#check = check;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    const previous = this.#held;
    this.#held = chunk;
    done(null, previous);
  }

  override _flush(done: TransformCallback): void {
    this.#check().then(
      () => done(null, this.#held),
      (error: unknown) => {
        this.refused = error instanceof Error ? error : new Error(String(error));
        done(
          new CommitRefusedError(`the upload was not completed: ${this.refused.message}`, { cause: error }),
        );
      },
    );
  }
}

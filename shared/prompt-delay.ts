// A job a worker moves to delayed is due at its time, but a worker blocked on BullMQ's marker hears
// of it only when Redis ends that blocking wait, at Redis's next timer tick: up to 1/hz s late
// (100 ms at Redis's default hz 10, a second at the hz 1 the bundled Redis runs at, so that it
// costs next to nothing at rest). A step that asks to be looked at again in 500 ms would wait up to
// three times that. So for short delays the process that set one promotes the job itself when due;
// longer ones (a cluster's next look at rest) are left to Redis, where a tick does not matter.
import { DelayedError, type Job } from "bullmq";

/** Delays up to this long are promoted by the process's own timer. */
export const PROMPT_DELAY_MAX_MS = 5_000;

export interface PromptDelays {
  /** Moves the active job to delayed for ms, and promotes it when due if the delay is short. */
  delay(job: Job, token: string | undefined, ms: number): Promise<void>;
  /** How many promotion timers are armed (for tests). */
  armed(): number;
  /** Clears every timer: the worker is closing. */
  close(): void;
}

export function promptDelays(): PromptDelays {
  const timers = new Map<string, NodeJS.Timeout>();
  const disarm = (id: string) => {
    clearTimeout(timers.get(id));
    timers.delete(id);
  };
  return {
    async delay(job, token, ms) {
      const wait = Math.max(0, ms);
      await job.moveToDelayed(Date.now() + wait, token);
      const id = job.id ?? "";
      // A newer delay of the same job replaces what an earlier one armed.
      disarm(id);
      if (id === "" || wait === 0 || wait > PROMPT_DELAY_MAX_MS) return;
      const timer = setTimeout(() => {
        timers.delete(id);
        // Refused when the job is no longer delayed: it ran already (Redis woke a worker in time,
        // or an event promoted it), which is what the timer was for. Another worker process may
        // have delayed it anew meanwhile; it is then looked at early, once, which a look allows.
        job.promote().catch(() => undefined);
      }, wait);
      timer.unref();
      timers.set(id, timer);
    },
    armed: () => timers.size,
    close() {
      for (const id of [...timers.keys()]) disarm(id);
    },
  };
}

/** Delays the job and ends its processor's run, as BullMQ asks of a job that moved itself. */
export async function delayJob(
  delays: PromptDelays,
  job: Job,
  token: string | undefined,
  ms: number,
): Promise<never> {
  await delays.delay(job, token, ms);
  throw new DelayedError();
}

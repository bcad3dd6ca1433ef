// A per-cluster lease in Redis: the second half of "one step in flight per cluster". The queue
// keeps one job per cluster, but BullMQ hands a job to another worker when the first one's lock
// lapses (a long GC pause, a frozen process), so a worker holds this lease for the whole step,
// renews it while it works, and checks it before every change (`guard`). A worker killed with
// SIGKILL simply stops renewing: the lease expires after its TTL and the next worker takes over.
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { KEY_PREFIX } from "./queue.ts";

const RENEW = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`;

export class LeaseLostError extends Error {
  override name = "LeaseLostError";
}

export interface Lease {
  /** Throws LeaseLostError when another worker holds the lease now. */
  guard(): Promise<void>;
  release(): Promise<void>;
}

export function leaseKey(clusterKey: string): string {
  return `${KEY_PREFIX}:lease:${clusterKey}`;
}

/** Takes the lease, or returns the ms until the current holder's lease expires. */
export async function acquireLease(
  redis: Redis,
  clusterKey: string,
  ttlMs: number,
): Promise<{ lease: Lease } | { heldForMs: number }> {
  const key = leaseKey(clusterKey);
  const token = randomBytes(12).toString("hex");
  const ok = await redis.set(key, token, "PX", ttlMs, "NX");
  if (ok !== "OK") {
    const remaining = await redis.pttl(key);
    return { heldForMs: remaining > 0 ? remaining : ttlMs };
  }
  let lost = false;
  // Renew at a third of the TTL, so two missed renewals still leave time.
  const timer = setInterval(
    () => {
      redis
        .eval(RENEW, 1, key, token, String(ttlMs))
        .then((renewed) => {
          if (renewed !== 1) lost = true;
        })
        .catch(() => {
          // A Redis hiccup: the next renewal or guard() decides.
        });
    },
    Math.max(100, Math.floor(ttlMs / 3)),
  );
  timer.unref();
  return {
    lease: {
      async guard() {
        if (!lost && (await redis.get(key)) === token) return;
        lost = true;
        throw new LeaseLostError(`lease on ${clusterKey} was lost; another worker owns this cluster now`);
      },
      async release() {
        clearInterval(timer);
        await redis.eval(RELEASE, 1, key, token).catch(() => undefined);
      },
    },
  };
}

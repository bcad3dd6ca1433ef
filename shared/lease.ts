// A per-cluster lease in Redis: the second half of "one step in flight per cluster". The queue
// keeps one job per cluster, but BullMQ hands a job to another worker when the first one's lock
// lapses (a long GC pause, a frozen process), so a worker holds this lease for the whole step,
// renews it while it works, and checks it before every change (`guard`). A worker killed with
// SIGKILL simply stops renewing: the lease expires after its TTL and the next worker takes over.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";
import { KEY_PREFIX } from "./queue.ts";

// Renews (and, for a reclaiming holder, takes back a lease found gone: ARGV[3] == "1").
const RENEW = `
local holder = redis.call("get", KEYS[1])
if holder == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
if holder == false and ARGV[3] == "1" then
  redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
  return 1
end
return 0`;
// Acquire and release each take one round trip with what the worker does around them folded in:
// taking the lease clears one key (the dirty mark, saying whether it was set) and reads two others
// (the read floor, the quick look's record); releasing it reports whether a key exists (the dirty
// mark, set again meanwhile). KEYS[2..4] may be the lease key itself when there is nothing to clear
// or read.
const ACQUIRE = `
if redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then
  local cleared = 0
  if KEYS[2] ~= KEYS[1] then cleared = redis.call("del", KEYS[2]) end
  local read = KEYS[3] ~= KEYS[1] and redis.call("get", KEYS[3]) or false
  local alsoRead = KEYS[4] ~= KEYS[1] and redis.call("get", KEYS[4]) or false
  return {1, read or "", cleared, alsoRead or ""}
end
return {0, redis.call("pttl", KEYS[1])}`;
const RELEASE = `
if redis.call("get", KEYS[1]) == ARGV[1] then redis.call("del", KEYS[1]) end
if KEYS[2] ~= KEYS[1] then return redis.call("exists", KEYS[2]) end
return 0`;

export class LeaseLostError extends Error {
  override name = "LeaseLostError";
}

export interface Lease {
  /** Throws LeaseLostError when another worker holds the lease now. */
  guard(): Promise<void>;
  /**
   * Gives the lease up. Returns whether the `check` key given to acquireLease exists at that moment
   * (true as well when Redis could not be asked: looking again is the safe answer).
   */
  release(): Promise<boolean>;
}

/**
 * With replicas > 0 (a Sentinel group), taking the lease also waits until that many replicas hold
 * it (Redis WAIT, in the same round trip), at most this long.
 */
const REPLICATION_WAIT_MS = 500;
/**
 * After a wait that no replica acknowledged, leases taken on that connection skip the wait this
 * long: WAIT blocks the connection it runs on (the process's commands connection), and with every
 * replica down each lease would hold every other command of the process for half a second. The
 * skipped waits would have timed out too, so no lease is less safe for it.
 */
export const UNREPLICATED_BACKOFF_MS = 10_000;
/**
 * How often guard() asks again when Redis answers with an error (a connection closed by a failover,
 * a primary turned replica): the step goes on once Redis confirms the lease, for up to a TTL.
 */
const GUARD_RETRY_MS = 250;
const unacknowledgedAt = new WeakMap<Redis, number>();

export interface LeaseOptions {
  /** Replicas that should hold the lease before the step runs (0: do not wait). */
  replicas?: number;
  /**
   * A lease found gone (Redis lost its data, a failover lost the key) is taken back rather than
   * lost, as long as no one else took it: for work that needs only "no other holder" (a backup).
   */
  reclaim?: boolean;
}

export interface LeaseKeys {
  /** Deleted in the same step as the lease is taken. */
  clear?: string;
  /** Read in the same step as the lease is taken (returned as `read`). */
  read?: string;
  /** Another key read in the same step (returned as `alsoRead`). */
  alsoRead?: string;
  /** Whether it exists is returned by release(). */
  check?: string;
}

export function leaseKey(clusterKey: string): string {
  return `${KEY_PREFIX}:lease:${clusterKey}`;
}

/**
 * Takes the lease (and clears and reads the given keys in the same step), or returns the ms until
 * the current holder's lease expires.
 */
export async function acquireLease(
  redis: Redis,
  clusterKey: string,
  ttlMs: number,
  keys: LeaseKeys = {},
  options: LeaseOptions = {},
): Promise<
  | {
      lease: Lease;
      read: string | undefined;
      alsoRead: string | undefined;
      /** Whether the `clear` key existed when it was cleared. */
      cleared: boolean;
      replicated: boolean;
    }
  | { heldForMs: number }
> {
  const key = leaseKey(clusterKey);
  const token = randomBytes(12).toString("hex");
  const replicas = options.replicas ?? 0;
  const args = [key, keys.clear ?? key, keys.read ?? key, keys.alsoRead ?? key, token, String(ttlMs)];
  let reply: unknown;
  let acknowledged = 0;
  const lastUnacknowledged = unacknowledgedAt.get(redis);
  const wait =
    replicas > 0 &&
    (lastUnacknowledged === undefined || Date.now() - lastUnacknowledged >= UNREPLICATED_BACKOFF_MS);
  if (wait) {
    // A replica promoted after the primary is lost knows the lease only if it had it: WAIT
    // returns once `replicas` replicas acknowledged everything written before it.
    const results = await redis
      .pipeline()
      .eval(ACQUIRE, 4, ...args)
      .wait(replicas, REPLICATION_WAIT_MS)
      .exec();
    const [acquireResult, waitResult] = results ?? [];
    if (acquireResult?.[0]) throw acquireResult[0];
    reply = acquireResult?.[1];
    acknowledged = typeof waitResult?.[1] === "number" ? waitResult[1] : 0;
    if (acknowledged >= replicas) unacknowledgedAt.delete(redis);
    else unacknowledgedAt.set(redis, Date.now());
  } else {
    reply = await redis.eval(ACQUIRE, 4, ...args);
  }
  const [taken, value, cleared, alsoRead] = Array.isArray(reply) ? reply : [];
  if (taken !== 1) {
    const remaining = typeof value === "number" ? value : -1;
    return { heldForMs: remaining > 0 ? remaining : ttlMs };
  }
  const read = typeof value === "string" && value !== "" ? value : undefined;
  const also = typeof alsoRead === "string" && alsoRead !== "" ? alsoRead : undefined;
  let lost = false;
  const reclaim = options.reclaim ? "1" : "0";
  // Renew at a third of the TTL, so two missed renewals still leave time.
  const timer = setInterval(
    () => {
      redis
        .eval(RENEW, 1, key, token, String(ttlMs), reclaim)
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
  // Whether Redis says this holder still has the lease. An error is not a "no": asked again until
  // Redis answers, for up to a TTL (after which the lease may have gone anyway).
  const confirm = async (): Promise<boolean> => {
    const deadline = Date.now() + ttlMs;
    for (;;) {
      try {
        return options.reclaim
          ? (await redis.eval(RENEW, 1, key, token, String(ttlMs), reclaim)) === 1
          : (await redis.get(key)) === token;
      } catch (error) {
        if (Date.now() + GUARD_RETRY_MS > deadline)
          throw new Error(`Redis did not confirm the lease on ${clusterKey} within ${ttlMs} ms`, {
            cause: error,
          });
        await sleep(GUARD_RETRY_MS);
      }
    }
  };
  return {
    read,
    alsoRead: also,
    cleared: cleared === 1,
    replicated: acknowledged >= replicas,
    lease: {
      async guard() {
        if (!lost && (await confirm())) return;
        lost = true;
        throw new LeaseLostError(`lease on ${clusterKey} was lost; another worker holds it now`);
      },
      async release() {
        clearInterval(timer);
        const exists = await redis.eval(RELEASE, 2, key, keys.check ?? key, token).catch(() => 1);
        return exists === 1;
      },
    },
  };
}

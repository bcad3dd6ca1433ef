// A client that keeps writing to an etcd cluster while tests break things around it, and records
// every write etcd acknowledged (a put answered with a revision: committed by a quorum). After the
// fault, `missingWrites` reads them all back with linearizable reads: an acknowledged write that is
// not there is data loss.
import { setTimeout as sleep } from "node:timers/promises";
import { Etcd3 } from "etcd3";

export interface AcknowledgedWrite {
  key: string;
  value: string;
  /** The revision etcd answered the put with. */
  revision: number;
  /** When the acknowledgement arrived (ms since the epoch). */
  atMs: number;
}

export interface WriterResult {
  acknowledged: AcknowledgedWrite[];
  /** Puts tried, acknowledged or not (failed and timed-out ones may or may not have committed). */
  attempted: number;
  /** The longest time between two acknowledged writes. */
  longestGapMs: number;
}

export interface Writer {
  /** Acknowledged writes so far (a copy). */
  acknowledged(): AcknowledgedWrite[];
  stop(): Promise<WriterResult>;
}

/** A put that takes longer than this is given up (and counted as not acknowledged). */
const PUT_DEADLINE_MS = 5_000;

/**
 * Writes `<prefix><n>` keys every `intervalMs` until stopped, to whichever endpoints `endpoints()`
 * returns at the time (members come and go under chaos). One client is kept while the endpoint list
 * stays the same; a failed put drops it, so the next one starts afresh.
 */
export function startWriter(
  endpoints: () => Promise<string[]>,
  prefix: string,
  options: { intervalMs?: number } = {},
): Writer {
  const acknowledged: AcknowledgedWrite[] = [];
  let attempted = 0;
  let stopped = false;
  // Gaps are counted from the first acknowledged write (the cluster may still be starting before it).
  let lastSuccess: number | undefined;
  let longestGapMs = 0;
  let client: { hosts: string; etcd: Etcd3 } | undefined;
  let lastHosts: string[] = [];
  const drop = () => {
    client?.etcd.close();
    client = undefined;
  };
  const running = (async () => {
    let i = 0;
    while (!stopped) {
      // When discovery fails (kube-apiserver down), keep writing to the members last seen: the
      // writer measures etcd's availability, not the API server's.
      const hosts = await endpoints().catch(() => lastHosts);
      lastHosts = hosts;
      if (hosts.length > 0) {
        const joined = [...hosts].sort().join(",");
        if (client?.hosts !== joined) {
          drop();
          client = {
            hosts: joined,
            etcd: new Etcd3({ hosts, grpcOptions: { "grpc.use_local_subchannel_pool": 1 } }),
          };
        }
        const key = `${prefix}${String(i++).padStart(7, "0")}`;
        const value = `${key}@${Date.now()}`;
        attempted++;
        try {
          const answer = await client.etcd
            .put(key)
            .value(value)
            .options({ deadline: Date.now() + PUT_DEADLINE_MS })
            .exec();
          const now = Date.now();
          acknowledged.push({ key, value, revision: Number(answer.header.revision), atMs: now });
          longestGapMs = Math.max(longestGapMs, now - (lastSuccess ?? now));
          lastSuccess = now;
        } catch {
          // Not acknowledged: it may or may not have committed, so it is never checked.
          drop();
        }
      }
      await sleep(options.intervalMs ?? 50);
    }
    drop();
  })();
  return {
    acknowledged: () => [...acknowledged],
    async stop() {
      stopped = true;
      await running;
      longestGapMs = Math.max(longestGapMs, Date.now() - (lastSuccess ?? Date.now()));
      return { acknowledged: [...acknowledged], attempted, longestGapMs };
    },
  };
}

/**
 * The acknowledged writes that are not in the cluster with their value, read back with
 * linearizable range reads (through the leader's quorum, never a member's possibly stale copy).
 */
export async function missingWrites(
  hosts: string[],
  writes: readonly AcknowledgedWrite[],
): Promise<AcknowledgedWrite[]> {
  if (writes.length === 0) return [];
  const client = new Etcd3({ hosts, grpcOptions: { "grpc.use_local_subchannel_pool": 1 } });
  try {
    const prefixes = new Set(writes.map((w) => w.key.replace(/\d+$/, "")));
    const stored = new Map<string, string>();
    for (const prefix of prefixes) {
      const values = await client.getAll().prefix(prefix).strings();
      for (const [key, value] of Object.entries(values)) stored.set(key, value);
    }
    return writes.filter((w) => stored.get(w.key) !== w.value);
  } finally {
    client.close();
  }
}

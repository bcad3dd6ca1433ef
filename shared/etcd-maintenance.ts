// Day-2 care of the members' databases over etcd's maintenance API: compacting the history,
// defragmenting one member, reading and disarming alarms. Each call opens its own client and
// closes it, as in etcd-members.ts.
import {
  callOptions,
  type EndpointStatus,
  type EtcdClientOptions,
  etcdError,
  onFirstAnswering,
  withClient,
} from "./etcd-members.ts";

/** etcd's alarm for a database that reached its space quota: writes are refused until it is disarmed. */
export const NOSPACE = "NOSPACE";

/**
 * A defragmentation rewrites the member's whole database file while the member serves nothing:
 * seconds per GiB on a disk that keeps up, minutes on a slow one. The deadline only stops a member
 * that hangs from holding the step for ever.
 */
export const DEFRAG_TIMEOUT_MS = 5 * 60_000;

const ERR_COMPACTED = "mvcc: required revision has been compacted";

/** The alarms a member reports in its Status ("memberID:8e9e05c52164694d  alarm:NOSPACE" → "NOSPACE"). */
export function raisedAlarms(status: EndpointStatus | undefined): string[] {
  if (!status?.ok) return [];
  return (status.errors ?? []).flatMap((text) => {
    const match = /alarm:([A-Z]+)/.exec(text);
    return match?.[1] ? [match[1]] : [];
  });
}

/** The share of a member's database file that is free pages, in percent (0 when unknown). */
export function fragmentedPercent(status: EndpointStatus | undefined): number {
  const size = status?.dbSize ?? 0;
  const inUse = status?.dbSizeInUse ?? 0;
  if (size <= 0 || inUse <= 0 || inUse >= size) return 0;
  return ((size - inUse) / size) * 100;
}

/**
 * Compacts the history up to `revision` and waits until the compaction reached the members' disks
 * (physical), so a defragmentation right after gives the space back. A revision compacted already
 * (by an earlier attempt, or etcd's own auto-compaction) is no error: returns false.
 */
export async function compactHistory(
  endpoints: readonly string[],
  revision: string,
  options: EtcdClientOptions,
): Promise<boolean> {
  // A physical compaction of a long history takes longer than a membership change.
  const patient = { ...options, timeoutMs: Math.max(options.timeoutMs ?? 0, 60_000) };
  return onFirstAnswering(
    endpoints,
    `compacting the history to revision ${revision}`,
    patient,
    "when-unanswered",
    async (client) => {
      try {
        await client.kv.compact({ revision, physical: true }, callOptions(patient));
        return true;
      } catch (error) {
        if (etcdError(error) === ERR_COMPACTED) return false;
        throw error;
      }
    },
  );
}

/** Defragments one member. It answers nothing else meanwhile; the other members are not affected. */
export async function defragmentMember(
  endpoint: string,
  options: EtcdClientOptions,
  timeoutMs = DEFRAG_TIMEOUT_MS,
): Promise<void> {
  try {
    await withClient(endpoint, options, (client) =>
      client.maintenance.defragment({ deadline: new Date(Date.now() + timeoutMs) }),
    );
  } catch (error) {
    throw new Error(`defragmenting the member at ${endpoint} failed: ${etcdError(error)}`, { cause: error });
  }
}

/** Disarms every raised alarm of `type` (each member's own); returns how many were raised. */
export async function disarmAlarms(
  endpoints: readonly string[],
  type: typeof NOSPACE,
  options: EtcdClientOptions,
): Promise<number> {
  return onFirstAnswering(
    endpoints,
    `disarming the ${type} alarm`,
    options,
    "when-unanswered",
    async (client) => {
      const { alarms } = await client.maintenance.alarm(
        { action: "Get", alarm: "None" },
        callOptions(options),
      );
      const raised = alarms.filter((a) => a.alarm.toUpperCase() === type);
      for (const alarm of raised) {
        await client.maintenance.alarm(
          { action: "Deactivate", memberID: alarm.memberID, alarm: alarm.alarm },
          callOptions(options),
        );
      }
      return raised.length;
    },
  );
}

/**
 * How many keys the store held at `revision`, read from one member's own copy (serializable: a
 * backup's member may be a follower). Undefined when that revision is compacted already.
 */
export async function countKeys(
  endpoint: string,
  revision: number,
  options: EtcdClientOptions,
): Promise<number | undefined> {
  try {
    return await withClient(endpoint, options, async (client) => {
      const answer = await client.kv.range(
        {
          key: Buffer.from([0]),
          range_end: Buffer.from([0]),
          revision,
          count_only: true,
          serializable: true,
        },
        callOptions({ ...options, timeoutMs: Math.max(options.timeoutMs ?? 0, 30_000) }),
      );
      return Number(answer.count);
    });
  } catch (error) {
    if (etcdError(error) === ERR_COMPACTED) return undefined;
    throw new Error(`counting the keys at revision ${revision} on ${endpoint} failed: ${etcdError(error)}`, {
      cause: error,
    });
  }
}

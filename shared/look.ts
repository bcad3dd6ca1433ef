// The quick look: how a cluster at rest is checked between full observations.
//
// What can go wrong with a member reaches the operator as an event (its pod's phase, readiness,
// restarts or deletion; an owned Service or budget changed or deleted; the EtcdCluster changed),
// and such an event makes the next look a full one. What no event reports lives inside etcd: an
// alarm (NOSPACE leaves members Ready), a new leader or term, a database that grew or freed pages.
// A full look (API reads, every member's Status, the member list) ending steady therefore leaves a
// record of those in Redis, and until the record is due the periodic look asks one member for its
// Status (one request, a different member each time) and compares. Anything different, no
// answer, or the record due: a full look.
import { type EndpointStatus, endpointStatuses, leaderId } from "./etcd-members.ts";
import type { EtcdClientOptions } from "./etcd-options.ts";
import { KEY_PREFIX } from "./queue.ts";

export interface LookRecord {
  /** Until then quick looks may stand in for full ones (ms since the epoch). */
  dueMs: number;
  leaderId: string;
  raftTerm: string;
  /** Each answering member's database: file size and bytes in use. */
  members: { endpoint: string; dbSize: number; dbSizeInUse: number }[];
}

/** A database that changed by more than this share (or these bytes) since the full look differs. */
const DB_CHANGE_SHARE = 0.1;
const DB_CHANGE_BYTES = 4 * 1024 * 1024;

export function lookKey(clusterKey: string): string {
  return `${KEY_PREFIX}:look:${clusterKey}`;
}

/**
 * The record a steady full look leaves, or undefined when quick looks cannot stand in for the next
 * one: a member did not answer or reports an alarm, or no leader.
 */
export function lookRecord(
  statuses: readonly EndpointStatus[],
  options: { nowMs: number; fullLookIntervalMs: number },
): LookRecord | undefined {
  if (statuses.length === 0 || statuses.some((s) => !s.ok || (s.errors?.length ?? 0) > 0)) return undefined;
  const leader = leaderId(statuses);
  const term = statuses.find((s) => s.memberId === leader)?.raftTerm;
  if (!leader || !term) return undefined;
  return {
    dueMs: options.nowMs + options.fullLookIntervalMs,
    leaderId: leader,
    raftTerm: term,
    members: statuses.map((s) => ({
      endpoint: s.endpoint,
      dbSize: s.dbSize ?? 0,
      dbSizeInUse: s.dbSizeInUse ?? 0,
    })),
  };
}

export function parseLookRecord(text: string | undefined): LookRecord | undefined {
  if (!text) return undefined;
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== "object" || value === null) return undefined;
    const record = value as Partial<LookRecord>;
    return typeof record.dueMs === "number" &&
      typeof record.leaderId === "string" &&
      typeof record.raftTerm === "string" &&
      Array.isArray(record.members) &&
      record.members.length > 0
      ? (record as LookRecord)
      : undefined;
  } catch {
    return undefined;
  }
}

function changed(before: number, after: number): boolean {
  const delta = Math.abs(after - before);
  return delta > DB_CHANGE_BYTES || delta > before * DB_CHANGE_SHARE;
}

/** What a member's answer shows that differs from the record; undefined when nothing does. */
export function difference(record: LookRecord, status: EndpointStatus): string | undefined {
  if (!status.ok) return `${status.endpoint} did not answer: ${status.error ?? "no reason"}`;
  if ((status.errors?.length ?? 0) > 0) return `${status.endpoint} reports ${status.errors?.join(", ")}`;
  if (status.leaderId !== record.leaderId || status.raftTerm !== record.raftTerm)
    return `leader or term changed (${status.leaderId}/${status.raftTerm})`;
  const before = record.members.find((m) => m.endpoint === status.endpoint);
  if (!before) return `${status.endpoint} is not in the record`;
  if (changed(before.dbSize, status.dbSize ?? 0) || changed(before.dbSizeInUse, status.dbSizeInUse ?? 0))
    return `${status.endpoint}'s database changed size`;
  return undefined;
}

/**
 * One member's Status against the record: undefined when it matches, else why a full look is
 * needed. The member asked rotates with `turn`, so each is asked in its turn.
 */
export async function quickLook(
  record: LookRecord,
  turn: number,
  etcd: EtcdClientOptions,
): Promise<string | undefined> {
  const member = record.members[turn % record.members.length];
  if (!member) return "no member in the record";
  const [status] = await endpointStatuses([member.endpoint], etcd);
  return status ? difference(record, status) : "no answer";
}

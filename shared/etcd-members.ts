// The operator's client for etcd membership and health, on the `etcd3` package (gRPC, etcd v3 API).
//
// Reconcile steps are short-lived and stateless, so every function here takes the endpoints to talk
// to, opens its own client per endpoint and closes it before returning: nothing is kept between
// calls. Every RPC carries a deadline (3 s by default), so a dead or hung member costs at most that
// much per endpoint tried and never hangs a step.
//
// Member IDs are uint64. etcd3 hands them over as decimal strings and they stay strings here: most
// IDs are above 2^53, where a JS number silently loses digits. `memberIdHex` gives the hex form that
// etcdctl and etcd's own logs print.
//
// Why one client per endpoint instead of one etcd3 client over all of them: etcd3's pool picks hosts
// in random order, retries on its own and trips a per-host circuit breaker. Here the order is the
// caller's, each failure is reported against the endpoint that caused it, and a write is only sent
// to the next endpoint when the previous one could not be reached.
import {
  Etcd3,
  EtcdPermissionDeniedError,
  GRPCCancelledError,
  GRPCDeadlineExceededError,
  GRPCUnavailableError,
  type IMember,
  type IOptions,
  type IStatusResponse,
} from "etcd3";
import { fetchMemberJson } from "./etcd-http.ts";
import { DEFAULT_ETCD_TIMEOUT_MS, type EtcdClientOptions } from "./etcd-options.ts";

export { DEFAULT_ETCD_TIMEOUT_MS, type EtcdClientOptions, type EtcdTLS } from "./etcd-options.ts";

export interface MemberInfo {
  /** uint64 as a decimal string, as etcd3 returns it. */
  id: string;
  /** Empty until the member has started and published itself. */
  name: string;
  peerURLs: string[];
  /** Empty until the member has started. */
  clientURLs: string[];
  isLearner: boolean;
}

/** One endpoint's answer to Status. `ok` means it answered, not that it is healthy. */
export interface EndpointStatus {
  endpoint: string;
  ok: boolean;
  /** Why the endpoint did not answer (ok: false). */
  error?: string;
  memberId?: string;
  /** The leader this member follows; "0" while it knows none. */
  leaderId?: string;
  /** The member's server version, e.g. "3.5.35". */
  version?: string;
  raftIndex?: string;
  raftTerm?: string;
  raftAppliedIndex?: string;
  /** Bytes allocated by the backend database (the file's size). */
  dbSize?: number;
  /** Bytes of the database logically in use; the rest is free pages a defragmentation gives back. */
  dbSizeInUse?: number;
  /** The member's space quota in bytes (etcd 3.6 and newer report it). */
  dbSizeQuota?: number;
  /** The store's revision as this member last applied it. */
  revision?: string;
  isLearner?: boolean;
  /** Alarms and health problems the member reports (e.g. NOSPACE). */
  errors?: string[];
}

export interface EndpointHealth {
  endpoint: string;
  healthy: boolean;
  /** Why it is not healthy. */
  error?: string;
  memberId?: string;
  isLearner?: boolean;
}

export interface AddMemberResult {
  /** The new member: no name and no client URLs until its process starts. */
  member: MemberInfo;
  /** Every member after the add: what the new member's --initial-cluster must list. */
  members: MemberInfo[];
  /**
   * True when a member with this peer URL was already there (an earlier attempt got through), and
   * member/members come from the member list instead. Check `member.isLearner` then: the earlier
   * attempt may have added a voter, or the learner may have been promoted since.
   */
  existed: boolean;
}

export type PromoteResult =
  | { promoted: true }
  | {
      promoted: false;
      /**
       * not-caught-up: the learner is behind the leader's log (or not running): try again later.
       * not-learner: it is a voter already (perhaps an earlier attempt promoted it).
       * not-found: no member with this ID.
       */
      reason: "not-caught-up" | "not-learner" | "not-found";
    };

export interface MoveLeaderResult {
  /** The leader before the call. */
  fromId: string;
  /** False when the target already was the leader (nothing was sent). */
  moved: boolean;
}

// etcd's error texts (server/etcdserver/api/v3rpc/rpctypes), stable across 3.5–3.7. etcd3 keeps
// them only inside the message ("9 FAILED_PRECONDITION: etcdserver: ..."), so they are matched
// exactly after the gRPC prefix is cut off.
const ERR_MEMBER_NOT_FOUND = "etcdserver: member not found";
const ERR_LEARNER_NOT_READY = "etcdserver: can only promote a learner member which is in sync with leader";
const ERR_MEMBER_NOT_LEARNER = "etcdserver: can only promote a learner member";
const ERR_PEER_URL_EXISTS = "etcdserver: Peer URLs already exists";
// A member's ID hashes its peer URLs with the time in whole seconds, so a repeated add of the same
// URL within the same second collides on the ID before the peer URL check is reached.
const ERR_MEMBER_ID_EXISTS = "etcdserver: member ID already exist";
const ERR_NOT_FOR_LEARNER = "etcdserver: rpc not supported for learner";

const UINT64_MAX = (1n << 64n) - 1n;

// ---------------------------------------------------------------------------------------------------
// Member IDs

/** Throws unless `id` is a uint64 in decimal, the form etcd3 uses. */
function requireMemberId(id: string): string {
  if (!/^[0-9]{1,20}$/.test(id) || BigInt(id) > UINT64_MAX || BigInt(id) === 0n) {
    throw new Error(`invalid etcd member ID "${id}": expected a non-zero uint64 in decimal`);
  }
  return id;
}

/** The hex form etcdctl and etcd's logs use, e.g. "8e9e05c52164694d". */
export function memberIdHex(id: string): string {
  return BigInt(requireMemberId(id)).toString(16);
}

/** The decimal form of a hex member ID (as printed by etcdctl). */
export function memberIdFromHex(hex: string): string {
  if (!/^(0x)?[0-9a-fA-F]{1,16}$/.test(hex)) throw new Error(`invalid etcd member ID "${hex}": expected hex`);
  return requireMemberId(BigInt(hex.startsWith("0x") ? hex : `0x${hex}`).toString(10));
}

// ---------------------------------------------------------------------------------------------------
// Clients

export function createEtcdClient(
  endpoint: string,
  options: EtcdClientOptions,
  channel: Record<string, number> = {},
): Etcd3 {
  const clientOptions: IOptions = {
    hosts: endpoint,
    // grpc-js shares connections to one address across all clients of the process, including
    // their reconnect back-off: after a member refused one connection (it was still starting),
    // every later client would wait out that back-off (1 s, 1.6 s, 2.6 s, … up to 2 min) and
    // time out. A private pool per client makes each call dial afresh.
    grpcOptions: { "grpc.use_local_subchannel_pool": 1, ...channel },
  };
  const tls = options.tls;
  if (tls) {
    if ((tls.cert === undefined) !== (tls.key === undefined)) {
      throw new Error("etcd TLS options need both a client cert and key, or neither");
    }
    // etcd3 strips the URL scheme and, given credentials, always dials TLS.
    clientOptions.credentials = {
      rootCertificate: Buffer.from(tls.ca),
      privateKey: tls.key === undefined ? undefined : Buffer.from(tls.key),
      certChain: tls.cert === undefined ? undefined : Buffer.from(tls.cert),
    };
    if (tls.serverName) {
      clientOptions.grpcOptions = {
        ...clientOptions.grpcOptions,
        "grpc.ssl_target_name_override": tls.serverName,
        "grpc.default_authority": tls.serverName,
      };
    }
  }
  return new Etcd3(clientOptions);
}

/** Runs `work` with a fresh client for one endpoint and always closes it. */
export async function withClient<T>(
  endpoint: string,
  options: EtcdClientOptions,
  work: (client: Etcd3) => Promise<T>,
): Promise<T> {
  const client = createEtcdClient(endpoint, options);
  try {
    return await work(client);
  } finally {
    client.close();
  }
}

/**
 * gRPC call options with an absolute deadline. Taken once per RPC and passed explicitly: etcd3 retries
 * "recoverable" errors on its own, and a fixed deadline keeps those retries inside the same budget
 * (a per-attempt deadline would let a hung member cost several timeouts).
 */
export function callOptions(options: EtcdClientOptions): { deadline: Date } {
  return { deadline: new Date(Date.now() + (options.timeoutMs ?? DEFAULT_ETCD_TIMEOUT_MS)) };
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message.trim() : String(error);
}

/** etcd's own error text: the message without etcd3's "<code> <NAME>: " prefix. */
export function etcdError(error: unknown): string {
  return errorMessage(error).replace(/^\d+ [A-Z_]+: /, "");
}

/**
 * This endpoint could not give an answer (down, hung, no leader, cut off, or a learner, which
 * serves neither membership reads nor changes): another member may. Anything else is the
 * cluster's definite answer, which another member would repeat.
 */
function isUnanswered(error: unknown): boolean {
  return (
    error instanceof GRPCUnavailableError ||
    error instanceof GRPCDeadlineExceededError ||
    error instanceof GRPCCancelledError ||
    // UNAVAILABLE in 3.5, FAILED_PRECONDITION from 3.6 on.
    etcdError(error) === ERR_NOT_FOR_LEARNER
  );
}

type FallThrough = "on-any-error" | "when-unanswered";

/**
 * Runs `work` against the endpoints in order until one gives an answer. Reads move on after any
 * error; writes only when the endpoint could not answer, since a definite refusal would be repeated
 * by every member. Writes that time out may still have been applied, so every write here is made
 * safe to repeat (see the callers).
 */
export async function onFirstAnswering<T>(
  endpoints: readonly string[],
  what: string,
  options: EtcdClientOptions,
  fallThrough: FallThrough,
  work: (client: Etcd3) => Promise<T>,
): Promise<T> {
  return firstAnswer(endpoints, what, fallThrough, (endpoint) => withClient(endpoint, options, work));
}

/** The endpoint loop of onFirstAnswering, for any way of asking one endpoint (gRPC or the gateway). */
async function firstAnswer<T>(
  endpoints: readonly string[],
  what: string,
  fallThrough: FallThrough,
  attempt: (endpoint: string) => Promise<T>,
): Promise<T> {
  if (endpoints.length === 0) throw new Error(`${what}: no etcd endpoints given`);
  const failures: string[] = [];
  const errors: unknown[] = [];
  for (const endpoint of endpoints) {
    try {
      return await attempt(endpoint);
    } catch (error) {
      if (fallThrough === "when-unanswered" && !isUnanswered(error)) {
        throw new Error(`${what} failed at ${endpoint}: ${etcdError(error)}`, { cause: error });
      }
      failures.push(`${endpoint}: ${errorMessage(error)}`);
      errors.push(error);
    }
  }
  throw new Error(`${what}: no etcd endpoint answered (${failures.join("; ")})`, {
    cause: new AggregateError(errors),
  });
}

function toMemberInfo(member: IMember): MemberInfo {
  return {
    id: member.ID,
    name: member.name ?? "",
    peerURLs: member.peerURLs ?? [],
    clientURLs: member.clientURLs ?? [],
    isLearner: member.isLearner ?? false,
  };
}

// ---------------------------------------------------------------------------------------------------
// Reading the cluster

export interface ListMembersOptions extends EtcdClientOptions {
  /**
   * Read the answering member's own copy of the list instead of going through the leader: works
   * without a quorum (to see what is left when one is lost), but may miss a very recent change.
   */
  serializable?: boolean;
}

/**
 * The member list, read linearizably by default (through the leader, so a member cut off from the
 * cluster cannot answer with a stale list). Tries the endpoints in order, moving on after any
 * error (a learner, for one, refuses to list members at all); throws when none answers.
 */
export async function listMembers(
  endpoints: readonly string[],
  options: ListMembersOptions = {},
): Promise<MemberInfo[]> {
  const linearizable = options.serializable !== true;
  if (!options.tls) return listMembersOverGateway(endpoints, linearizable, options);
  return onFirstAnswering(endpoints, "listing etcd members", options, "on-any-error", async (client) => {
    const response = await client.cluster.memberList({ linearizable }, callOptions(options));
    return response.members.map(toMemberInfo);
  });
}

/** One member of etcd's MemberList answer through its gRPC gateway (proto3 JSON). */
interface GatewayMember {
  ID?: string;
  name?: string;
  peerURLs?: string[];
  clientURLs?: string[];
  isLearner?: boolean;
}

/**
 * The member list over etcd's gRPC gateway, for clusters without client TLS (see endpointStatus
 * for why): same order and fall-through as over gRPC, a pooled HTTP request instead of a client.
 */
async function listMembersOverGateway(
  endpoints: readonly string[],
  linearizable: boolean,
  options: EtcdClientOptions,
): Promise<MemberInfo[]> {
  return firstAnswer(endpoints, "listing etcd members", "on-any-error", async (endpoint) => {
    const body = (await fetchMemberJson(`${endpoint}/v3/cluster/member/list`, options, { linearizable })) as {
      members?: GatewayMember[];
    };
    if (!Array.isArray(body.members))
      throw new Error(`not a MemberList answer: ${JSON.stringify(body).slice(0, 200)}`);
    return body.members.map((member) => {
      if (typeof member.ID !== "string") throw new Error(`a member without an ID: ${JSON.stringify(member)}`);
      return {
        id: member.ID,
        name: member.name ?? "",
        peerURLs: member.peerURLs ?? [],
        clientURLs: member.clientURLs ?? [],
        isLearner: member.isLearner === true,
      };
    });
  });
}

/** etcd's Status answer through its gRPC gateway (proto3 JSON: uint64 as strings, defaults left out). */
interface GatewayStatus {
  header?: { member_id?: string; revision?: string };
  version?: string;
  dbSize?: string;
  dbSizeInUse?: string;
  dbSizeQuota?: string;
  leader?: string;
  raftIndex?: string;
  raftTerm?: string;
  raftAppliedIndex?: string;
  errors?: string[];
  isLearner?: boolean;
}

function fromGatewayStatus(endpoint: string, body: unknown): EndpointStatus {
  const status = (typeof body === "object" && body !== null ? body : {}) as GatewayStatus;
  const memberId = status.header?.member_id;
  if (typeof memberId !== "string" || typeof status.version !== "string") {
    return { endpoint, ok: false, error: `not an etcd Status answer: ${JSON.stringify(body).slice(0, 200)}` };
  }
  return {
    endpoint,
    ok: true,
    memberId,
    leaderId: status.leader ?? "0",
    version: status.version,
    raftIndex: status.raftIndex ?? "0",
    raftTerm: status.raftTerm ?? "0",
    raftAppliedIndex: status.raftAppliedIndex ?? "0",
    dbSize: Number(status.dbSize ?? 0),
    dbSizeInUse: Number(status.dbSizeInUse ?? 0),
    dbSizeQuota: status.dbSizeQuota === undefined ? undefined : Number(status.dbSizeQuota),
    revision: status.header?.revision ?? "0",
    isLearner: status.isLearner === true,
    errors: Array.isArray(status.errors) ? status.errors.map(String) : [],
  };
}

function fromStatus(endpoint: string, status: IStatusResponse): EndpointStatus {
  return {
    endpoint,
    ok: true,
    memberId: status.header.member_id,
    leaderId: status.leader,
    version: status.version,
    raftIndex: status.raftIndex,
    raftTerm: status.raftTerm,
    raftAppliedIndex: status.raftAppliedIndex,
    dbSize: Number(status.dbSize),
    dbSizeInUse: Number(status.dbSizeInUse ?? 0),
    revision: status.header.revision,
    isLearner: status.isLearner ?? false,
    errors: status.errors ?? [],
  };
}

/**
 * Status of one member. Without TLS it goes through etcd's gRPC gateway (POST /v3/maintenance/status,
 * on by default in every etcd the operator runs): the same answer over one pooled HTTP request,
 * where a fresh gRPC client per endpoint cost ~1.8 ms of CPU each, a third of a reconcile of a
 * quiet cluster. With TLS it stays on gRPC: with --client-cert-auth the gateway dials its own gRPC
 * server with the member's serving certificate, which is refused unless that certificate is also
 * valid for client auth, and users bring their own certificates.
 */
async function endpointStatus(endpoint: string, options: EtcdClientOptions): Promise<EndpointStatus> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_ETCD_TIMEOUT_MS;
  try {
    if (options.tls) {
      const status = await withClient(endpoint, options, (client) =>
        client.maintenance.status(callOptions(options)),
      );
      return fromStatus(endpoint, status);
    }
    return fromGatewayStatus(
      endpoint,
      await fetchMemberJson(`${endpoint}/v3/maintenance/status`, options, {}),
    );
  } catch (error) {
    if (error instanceof Error && error.name === "TimeoutError") {
      return { endpoint, ok: false, error: `Deadline exceeded: no Status answer within ${timeoutMs} ms` };
    }
    const cause = error instanceof Error && error.cause instanceof Error ? `: ${error.cause.message}` : "";
    return { endpoint, ok: false, error: `${errorMessage(error)}${cause}` };
  }
}

/**
 * Status of each endpoint, asked in parallel, in the order given. Never throws: an endpoint that
 * is down, hung past the deadline or misconfigured comes back as ok: false with the error.
 */
export async function endpointStatuses(
  endpoints: readonly string[],
  options: EtcdClientOptions = {},
): Promise<EndpointStatus[]> {
  return Promise.all(endpoints.map((endpoint) => endpointStatus(endpoint, options)));
}

/**
 * The current leader's member ID as the answering endpoints see it, or undefined when none knows
 * one. Members may disagree during an election; the one reporting the highest raft term is the
 * newest, as in raft itself (a term has at most one leader).
 */
export function leaderId(statuses: readonly EndpointStatus[]): string | undefined {
  let best: { id: string; term: bigint } | undefined;
  for (const status of statuses) {
    if (!status.ok || !status.leaderId || status.leaderId === "0" || !status.raftTerm) continue;
    const term = BigInt(status.raftTerm);
    if (best === undefined || term > best.term) best = { id: status.leaderId, term };
  }
  return best?.id;
}

/**
 * Whether one member is healthy, over gRPC like everything else here (same TLS, no second
 * protocol), checking what etcd's /health and `etcdctl endpoint health` check:
 * - it answers Status, follows a leader and reports no alarms;
 * - a voter also serves a linearizable read, which needs a working quorum. A permission error
 *   still counts as healthy: the cluster answered (auth is enabled, we hold no token).
 * A learner cannot serve linearizable reads, so for a learner the Status part is the check.
 * Takes up to two RPCs, each with its own deadline. Never throws.
 */
export async function endpointHealth(
  endpoint: string,
  options: EtcdClientOptions = {},
): Promise<EndpointHealth> {
  try {
    return await withClient(endpoint, options, (client) => checkHealth(client, endpoint, options));
  } catch (error) {
    return { endpoint, healthy: false, error: errorMessage(error) };
  }
}

async function checkHealth(
  client: Etcd3,
  endpoint: string,
  options: EtcdClientOptions,
): Promise<EndpointHealth> {
  const status = await client.maintenance.status(callOptions(options));
  const known = { endpoint, memberId: status.header.member_id, isLearner: status.isLearner ?? false };
  if (status.leader === "0") return { ...known, healthy: false, error: "member has no leader" };
  if (status.errors && status.errors.length > 0) {
    return { ...known, healthy: false, error: `member reports: ${status.errors.join("; ")}` };
  }
  if (known.isLearner) return { ...known, healthy: true };
  try {
    await client.kv.range({ key: Buffer.from("health"), keys_only: true, limit: 1 }, callOptions(options));
  } catch (error) {
    if (!(error instanceof EtcdPermissionDeniedError)) {
      return { ...known, healthy: false, error: `linearizable read failed: ${errorMessage(error)}` };
    }
  }
  return { ...known, healthy: true };
}

// ---------------------------------------------------------------------------------------------------
// Changing membership

function requirePeerURL(peerURL: string): string {
  try {
    new URL(peerURL);
  } catch (error) {
    throw new Error(`invalid etcd peer URL "${peerURL}"`, { cause: error });
  }
  return peerURL;
}

/**
 * The member that already has this peer URL, if any. Read serializably: a voter added before its
 * process runs can leave the cluster without a quorum (a linearizable read would time out), and a
 * stale answer is harmless because etcd itself refuses a second member with the same peer URL.
 */
async function memberWithPeerURL(
  endpoints: readonly string[],
  peerURL: string,
  options: EtcdClientOptions,
): Promise<AddMemberResult | undefined> {
  const members = await listMembers(endpoints, { ...options, serializable: true });
  const member = members.find((m) => m.peerURLs.includes(peerURL));
  return member && { member, members, existed: true };
}

/**
 * Looks for the peer URL first, then adds. The look-up is what makes a repeat safe: etcd checks
 * quorum health ("unhealthy cluster", "not enough started members") before duplicates, so a
 * repeated MemberAdd alone would fail instead of finding the member. An add that races another
 * (or follows a timed-out attempt that got through) still ends at the existing member.
 */
async function addMember(
  endpoints: readonly string[],
  peerURL: string,
  isLearner: boolean,
  options: EtcdClientOptions,
): Promise<AddMemberResult> {
  requirePeerURL(peerURL);
  const existing = await memberWithPeerURL(endpoints, peerURL, options);
  if (existing) return existing;
  const what = `adding etcd ${isLearner ? "learner" : "member"} ${peerURL}`;
  const added = await onFirstAnswering(endpoints, what, options, "when-unanswered", async (client) => {
    try {
      const response = await client.cluster.memberAdd(
        { peerURLs: [peerURL], isLearner },
        callOptions(options),
      );
      const result: AddMemberResult = {
        member: toMemberInfo(response.member),
        members: response.members.map(toMemberInfo),
        existed: false,
      };
      return result;
    } catch (error) {
      const reason = etcdError(error);
      if (reason === ERR_PEER_URL_EXISTS || reason === ERR_MEMBER_ID_EXISTS) return undefined;
      throw error;
    }
  });
  if (added) return added;
  const raced = await memberWithPeerURL(endpoints, peerURL, options);
  if (!raced) throw new Error(`${what}: etcd says the member exists, but the member list has none`);
  return raced;
}

/**
 * Adds a learner (a non-voting member) with this peer URL. It does not count towards quorum, so
 * the cluster stays available however long the new process takes to start; promote it with
 * `promoteLearner` once it has caught up. Start the new member with
 * --initial-cluster-state=existing and `initialCluster(result.members, ...)`.
 * Safe to repeat: a member that already has this peer URL is returned with existed: true.
 * etcd allows one learner at a time ("too many learner members in cluster"), and refuses any add
 * ("unhealthy cluster") while fewer than a quorum of voters have been connected for 5 s, e.g.
 * just after a member (re)started: both come back as errors, to be retried later.
 */
export async function addLearner(
  endpoints: readonly string[],
  peerURL: string,
  options: EtcdClientOptions = {},
): Promise<AddMemberResult> {
  return addMember(endpoints, peerURL, true, options);
}

/**
 * Adds a voting member straight away, for clusters where learners are not wanted. The new member
 * counts towards quorum from this moment: until its process runs, a one-member cluster has no
 * quorum and a three-member cluster tolerates no further failure. Same idempotence as addLearner.
 */
export async function addVoter(
  endpoints: readonly string[],
  peerURL: string,
  options: EtcdClientOptions = {},
): Promise<AddMemberResult> {
  return addMember(endpoints, peerURL, false, options);
}

/**
 * The --initial-cluster value for a member being added: every member's name=peerURL, with the new
 * member under the name it will start with (etcd does not know that name yet). Mirrors what
 * `etcdctl member add` prints.
 */
export function initialCluster(
  members: readonly MemberInfo[],
  newMember: { id: string; name: string },
): string {
  return members
    .flatMap((member) => {
      const name = member.id === newMember.id ? newMember.name : member.name;
      return member.peerURLs.map((url) => `${name}=${url}`);
    })
    .join(",");
}

/**
 * Promotes a learner to a voter. A learner that is behind the leader (or not running) is an
 * expected state, not an error: it comes back as not-caught-up, to be tried again later.
 */
export async function promoteLearner(
  endpoints: readonly string[],
  memberId: string,
  options: EtcdClientOptions = {},
): Promise<PromoteResult> {
  requireMemberId(memberId);
  const what = `promoting etcd learner ${memberIdHex(memberId)}`;
  return onFirstAnswering(
    endpoints,
    what,
    options,
    "when-unanswered",
    async (client): Promise<PromoteResult> => {
      try {
        await client.cluster.memberPromote({ ID: memberId }, callOptions(options));
        return { promoted: true };
      } catch (error) {
        // ERR_MEMBER_NOT_LEARNER is a prefix of ERR_LEARNER_NOT_READY: compare whole texts.
        const reason = etcdError(error);
        if (reason === ERR_LEARNER_NOT_READY) return { promoted: false, reason: "not-caught-up" };
        if (reason === ERR_MEMBER_NOT_LEARNER) return { promoted: false, reason: "not-learner" };
        if (reason === ERR_MEMBER_NOT_FOUND) return { promoted: false, reason: "not-found" };
        throw error;
      }
    },
  );
}

/**
 * The endpoints in the order to send a removal: answering voters other than the one removed
 * first. A member that handles its own removal shuts down as it applies it and may never send the
 * reply; dead endpoints would only cost a timeout each.
 */
async function removalOrder(
  endpoints: readonly string[],
  memberId: string,
  options: EtcdClientOptions,
): Promise<string[]> {
  const statuses = await endpointStatuses(endpoints, options);
  const preferred = statuses
    .filter((s) => s.ok && s.memberId !== memberId && s.isLearner !== true)
    .map((s) => s.endpoint);
  return [...preferred, ...endpoints.filter((e) => !preferred.includes(e))];
}

/**
 * Removes a member. Idempotent: a member that is not there counts as removed (removed: false says
 * etcd no longer knew it, including when a reply was lost and a retry found it gone). Quorum
 * safety is the caller's job: etcd only refuses a removal that would leave fewer started members
 * than a quorum, or while the remaining voters have not been connected for 5 s ("unhealthy
 * cluster"); a dead member can be removed at once.
 */
export async function removeMember(
  endpoints: readonly string[],
  memberId: string,
  options: EtcdClientOptions = {},
): Promise<{ removed: boolean }> {
  requireMemberId(memberId);
  const what = `removing etcd member ${memberIdHex(memberId)}`;
  const ordered = await removalOrder(endpoints, memberId, options);
  return onFirstAnswering(ordered, what, options, "when-unanswered", async (client) => {
    try {
      await client.cluster.memberRemove({ ID: memberId }, callOptions(options));
      return { removed: true };
    } catch (error) {
      if (etcdError(error) === ERR_MEMBER_NOT_FOUND) return { removed: false };
      throw error;
    }
  });
}

/**
 * Hands leadership to another voter, e.g. before the leader is removed or restarted. etcd only
 * accepts MoveLeader at the leader, so this finds it with endpointStatuses and talks to the leader's
 * endpoint alone; the leader must therefore be one of `endpoints`. etcd answers once the transfer
 * is done. When the target already leads, nothing is sent.
 */
export async function moveLeader(
  endpoints: readonly string[],
  targetMemberId: string,
  options: EtcdClientOptions = {},
): Promise<MoveLeaderResult> {
  requireMemberId(targetMemberId);
  const what = `moving etcd leadership to ${memberIdHex(targetMemberId)}`;
  const statuses = await endpointStatuses(endpoints, options);
  const fromId = leaderId(statuses);
  if (fromId === undefined) {
    const seen = statuses.map((s) => `${s.endpoint}: ${s.ok ? `leader ${s.leaderId}` : s.error}`).join("; ");
    throw new Error(`${what}: no endpoint knows a leader (${seen})`);
  }
  if (fromId === targetMemberId) return { fromId, moved: false };
  const leader = statuses.find((s) => s.ok && s.memberId === fromId);
  if (!leader) {
    throw new Error(`${what}: leader ${memberIdHex(fromId)} is not among the reachable endpoints`);
  }
  try {
    await withClient(leader.endpoint, options, (client) =>
      client.maintenance.moveLeader({ targetID: targetMemberId }, callOptions(options)),
    );
  } catch (error) {
    throw new Error(`${what} failed at ${leader.endpoint}: ${etcdError(error)}`, { cause: error });
  }
  return { fromId, moved: true };
}

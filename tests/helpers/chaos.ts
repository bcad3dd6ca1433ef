// The faults of the chaos suite, done for real to a cluster on the local control plane: member
// processes SIGKILLed (the kubelet restarts them) and pods deleted, operator processes SIGKILLed
// (at a chosen step, seen in their own log), Redis restarted and wiped, kube-apiserver restarted,
// a member's data dir deleted, a member cut off from its peers. Each fault returns once it has
// taken effect; `waitConverged` then measures how long the cluster takes to be whole again.
import { execFile } from "node:child_process";
import { closeSync, openSync, readFileSync, readSync, rmSync, statSync, watch } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { CustomObjectsApi, type V1Pod } from "@kubernetes/client-node";
import { installCrds } from "../../infra/crds.ts";
import { type LocalCluster, startLocalCluster } from "../../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../../infra/local/kube-wait.ts";
import { type SentinelGroup, startSentinelGroup } from "../../infra/local/redis-sentinel.ts";
import { endpointStatuses } from "../../shared/etcd-members.ts";
import { Kube } from "../../shared/kube.ts";
import { connectRedis } from "../../shared/redis-connection.ts";
import { type ClusterClients, getCluster } from "./clusters.ts";
import { etcdPidOf } from "./etcd-processes.ts";
import { type OperatorProcess, startOperatorProcess } from "./operator-processes.ts";
import type { Chooser } from "./random.ts";
import { type AcknowledgedWrite, missingWrites, type Writer } from "./writer.ts";

const run = promisify(execFile);

/** The operator as separate processes, so each role can be killed on its own. */
export interface OperatorRoles {
  watcher: OperatorProcess;
  scheduler: OperatorProcess;
  workers: OperatorProcess[];
  start(role: "watcher" | "scheduler" | "worker"): OperatorProcess;
  stopAll(): Promise<void>;
}

/**
 * A local control plane with the CRDs and the operator's roles as processes, set for chaos: a
 * crash-looping member (its data dir deleted) is replaced after 20 s, while a 10 s partition heals in
 * place; a SIGKILLed worker's lease lapses after 5 s (default 10 s), so rounds that kill workers end
 * sooner. The short run and the soak share it, so their figures mean the same.
 */
export async function startChaosCluster(
  name: string,
  options: { sentinel?: boolean } = {},
): Promise<{ local: LocalCluster; c: ClusterClients; operator: OperatorRoles; sentinel?: SentinelGroup }> {
  const local = await startLocalCluster({ name, redis: !options.sentinel });
  const { kc, core } = clientsFor(local.kubeconfigPath);
  const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
  await installCrds(kc);
  // The group's files and pid files are in a folder of the instance: its cleanup stops them.
  const sentinel = options.sentinel
    ? await startSentinelGroup({ dir: join(local.dir, "redis-sentinel") })
    : undefined;
  const env = sentinel
    ? {
        ...CHAOS_OPERATOR_ENV,
        REDIS_SENTINELS: sentinel.sentinelsEnv,
        REDIS_SENTINEL_MASTER: sentinel.masterName,
      }
    : CHAOS_OPERATOR_ENV;
  const operator = startOperatorRoles(local, env);
  return { local, c, operator, ...(sentinel ? { sentinel } : {}) };
}

/** The operator settings of the chaos suite (see startChaosCluster). */
export const CHAOS_OPERATOR_ENV: Readonly<Record<string, string>> = {
  MEMBER_UNHEALTHY_GRACE_MS: "20000",
  LEASE_TTL_MS: "5000",
  LOG_LEVEL: "debug",
};

export function startOperatorRoles(local: LocalCluster, env: Record<string, string>): OperatorRoles {
  const roles: OperatorRoles = {
    watcher: startOperatorProcess(local, "watcher", env),
    scheduler: startOperatorProcess(local, "scheduler", env),
    workers: [startOperatorProcess(local, "worker", env)],
    start(role) {
      const started = startOperatorProcess(local, role, env);
      if (role === "watcher") roles.watcher = started;
      else if (role === "scheduler") roles.scheduler = started;
      else roles.workers.push(started);
      return started;
    },
    async stopAll() {
      for (const p of [roles.watcher, roles.scheduler, ...roles.workers]) await p.kill("SIGKILL");
    },
  };
  return roles;
}

export interface Target {
  local: LocalCluster;
  /** When the operator runs on a Sentinel group instead of the instance's single Redis. */
  sentinel?: SentinelGroup;
  c: ClusterClients;
  namespace: string;
  name: string;
  size: number;
  operator: OperatorRoles;
  rand: Chooser;
}

export interface FaultReport {
  kind: string;
  /** What exactly was done (which member, which step), for the log and a replay. */
  detail: string;
  /** Workers killed at a step (killWorkerAt): where, and the fresh worker started in its place. */
  kills?: { point: KillPoint; next: OperatorProcess }[];
}

export async function livePods(t: Pick<Target, "c" | "namespace" | "name">): Promise<V1Pod[]> {
  const pods = await t.c.core.listNamespacedPod({
    namespace: t.namespace,
    labelSelector: `etcd_cluster=${t.name}`,
  });
  return pods.items.filter((p) => !p.metadata?.deletionTimestamp);
}

function isReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True") ?? false;
}

export async function endpointsOf(t: Pick<Target, "c" | "namespace" | "name">): Promise<string[]> {
  return (await livePods(t)).flatMap((p) => (p.status?.podIP ? [`http://${p.status.podIP}:2379`] : []));
}

/**
 * What "converged" means after a fault, all at once: the operator's status, written for the
 * cluster's current spec (its generation), says Available, not Progressing, `size` voting members
 * all ready, and names exactly the live pods (so it has seen the world after the fault); every pod
 * is Ready; and every member answers with the same leader.
 */
export async function convergedNow(t: Pick<Target, "c" | "namespace" | "name" | "size">): Promise<string> {
  const cluster = await getCluster(t.c, t.namespace, t.name);
  const status = cluster.status;
  const condition = (type: string) => status?.conditions?.find((x) => x.type === type);
  // A spec change (an upgrade, a resize) is only done once a status was written for it.
  if (status?.observedGeneration !== cluster.metadata?.generation)
    return `status is of generation ${status?.observedGeneration}, the spec of ${cluster.metadata?.generation}`;
  if (condition("Available")?.status !== "True") return `not Available: ${condition("Available")?.message}`;
  if (condition("Progressing")?.status !== "False")
    return `Progressing: ${condition("Progressing")?.message}`;
  if (status?.size !== t.size || status.readyMembers !== t.size)
    return `status: ${status?.size} voters, ${status?.readyMembers} ready`;
  const pods = await livePods(t);
  const names = pods.map((p) => p.metadata?.name ?? "").sort();
  if (pods.length !== t.size || !pods.every(isReady)) return `pods: ${names.join(",")} not all Ready`;
  if ((status.members?.ready ?? []).join() !== names.join())
    return `status lists ${status.members?.ready?.join(",")}, pods are ${names.join(",")}`;
  const statuses = await endpointStatuses(
    pods.map((p) => `http://${p.status?.podIP}:2379`),
    { timeoutMs: 2_000 },
  );
  const leaders = new Set(statuses.map((s) => (s.ok ? s.leaderId : "down")));
  if (!statuses.every((s) => s.ok && !s.isLearner) || leaders.size !== 1 || leaders.has("0"))
    return `members: ${statuses.map((s) => (s.ok ? `leader ${s.leaderId}` : s.error)).join("; ")}`;
  return "";
}

/**
 * Waits until `convergedNow` holds, and `also` (what a case needs besides: "" when it holds, else
 * what is missing); returns the ms since `sinceMs`. Throws after `boundMs`.
 */
export async function waitConverged(
  t: Pick<Target, "c" | "namespace" | "name" | "size">,
  sinceMs: number,
  boundMs: number,
  also?: () => Promise<string>,
): Promise<number> {
  let last = "";
  await waitFor(
    `${t.namespace}/${t.name} to converge back to ${t.size} healthy members`,
    async () => {
      last = await convergedNow(t).catch((error: unknown) => String(error));
      if (last === "" && also) last = await also().catch((error: unknown) => String(error));
      return last === "" ? true : undefined;
    },
    {
      timeoutMs: Math.max(1_000, sinceMs + boundMs - Date.now()),
      intervalMs: 250,
      describe: async () => last,
    },
  );
  return Date.now() - sinceMs;
}

async function pickPod(t: Target): Promise<V1Pod> {
  const pods = (await livePods(t)).sort((a, b) =>
    (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""),
  );
  return t.rand.pick(pods);
}

async function waitPodGone(t: Target, uid: string): Promise<void> {
  await waitFor(
    `pod ${uid} to be gone`,
    async () => {
      const pods = await t.c.core.listNamespacedPod({
        namespace: t.namespace,
        labelSelector: `etcd_cluster=${t.name}`,
      });
      return pods.items.some((p) => p.metadata?.uid === uid) ? undefined : true;
    },
    { timeoutMs: 60_000, intervalMs: 100 },
  );
}

/** SIGKILLs a random member's etcd process; the kubelet starts it again on the same data dir. */
export async function killMemberProcess(t: Target): Promise<FaultReport> {
  const pod = await pickPod(t);
  const name = pod.metadata?.name ?? "";
  const pid = await waitFor(`the etcd process of ${name}`, async () => etcdPidOf(name), {
    timeoutMs: 30_000,
  });
  process.kill(pid, "SIGKILL");
  await waitFor(`${name}'s etcd ${pid} to die`, async () => (etcdPidOf(name) === pid ? undefined : true), {
    intervalMs: 50,
  });
  return { kind: "kill-member-process", detail: `${name} (pid ${pid})` };
}

/** Deletes a random member pod at once (its data dir goes with it): it is removed and replaced. */
export async function deleteMemberPod(t: Target): Promise<FaultReport> {
  const pod = await pickPod(t);
  const name = pod.metadata?.name ?? "";
  await t.c.core.deleteNamespacedPod({ namespace: t.namespace, name, gracePeriodSeconds: 0 });
  await waitPodGone(t, pod.metadata?.uid ?? "");
  return { kind: "delete-member-pod", detail: name };
}

/** Removes a random member's data dir and kills its etcd: it crash-loops or rejoins empty; either heals. */
export async function deleteDataDir(t: Target): Promise<FaultReport> {
  const pod = await pickPod(t);
  const name = pod.metadata?.name ?? "";
  const podDir = join(t.local.dir, "kubelet", "pods", `${t.namespace}_${name}_${pod.metadata?.uid}`);
  const dataDir = join(podDir, "volumes", "etcd-data", "data");
  statSync(dataDir);
  rmSync(dataDir, { recursive: true, force: true });
  const pid = etcdPidOf(name);
  if (pid) process.kill(pid, "SIGKILL");
  return { kind: "delete-data-dir", detail: `${name}: ${dataDir}` };
}

/**
 * Cuts a random member off from its peers for `ms`: blackhole routes to every peer's IP inside the
 * member's network namespace (no iptables here), so nothing it sends reaches them, answers
 * included; the host (the operator, the writer) still reaches it. The routes are removed after.
 */
export async function partitionMember(t: Target, ms: number): Promise<FaultReport> {
  const pods = await livePods(t);
  const victim = t.rand.pick(
    pods.sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? "")),
  );
  const name = victim.metadata?.name ?? "";
  const pid = etcdPidOf(name);
  if (!pid) throw new Error(`no etcd process for ${name}`);
  const netns = (await run("ip", ["netns", "identify", String(pid)])).stdout.trim();
  if (!netns) throw new Error(`etcd ${pid} of ${name} is in no named network namespace`);
  const peers = pods.flatMap((p) => (p !== victim && p.status?.podIP ? [p.status.podIP] : []));
  for (const ip of peers) await run("ip", ["-n", netns, "route", "add", "blackhole", `${ip}/32`]);
  try {
    await sleep(ms);
  } finally {
    for (const ip of peers)
      await run("ip", ["-n", netns, "route", "del", "blackhole", `${ip}/32`]).catch(() => undefined);
  }
  return { kind: "partition-member", detail: `${name} cut off from ${peers.join(", ")} for ${ms} ms` };
}

/** A pino line of an operator process, as far as the chaos suite reads it. */
export interface LogEntry {
  msg?: string;
  step?: string;
  phase?: string;
  [field: string]: unknown;
}

/**
 * Resolves when `worker` logs a line that `match` accepts, reading its log file as it grows. Only
 * lines written after the call count: a worker that ran the same step earlier must not be taken for
 * one that starts it now.
 */
export function logged(
  worker: OperatorProcess,
  match: (entry: LogEntry) => boolean,
  what: string,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let offset = statSync(worker.logFile).size;
    let pending = "";
    let done = false;
    const check = () => {
      if (done) return;
      const fd = openSync(worker.logFile, "r");
      try {
        const buffer = Buffer.alloc(64 * 1024);
        for (;;) {
          const n = readSync(fd, buffer, 0, buffer.length, offset);
          if (n <= 0) break;
          offset += n;
          pending += buffer.subarray(0, n).toString();
        }
      } finally {
        closeSync(fd);
      }
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) {
        if (!line.startsWith("{")) continue;
        try {
          if (match(JSON.parse(line) as LogEntry)) return finish();
        } catch {
          // A line that is not JSON (a stack trace, or the tail of a line cut at the start offset).
        }
      }
    };
    const watcher = watch(worker.logFile, check);
    const poll = setInterval(check, 200);
    const timer = setTimeout(() => {
      finish(new Error(`worker ${worker.logFile} did not log ${what} within ${timeoutMs} ms`));
    }, timeoutMs);
    const aborted = () => finish(new Error(`stopped waiting for ${what}`));
    signal?.addEventListener("abort", aborted);
    function finish(error?: Error) {
      done = true;
      watcher.close();
      clearInterval(poll);
      clearTimeout(timer);
      signal?.removeEventListener("abort", aborted);
      if (error) reject(error);
      else resolve();
    }
    if (signal?.aborted) aborted();
    else check();
  });
}

/** Where the chaos suite kills a worker: the start of a reconcile step, or of an EtcdRestore phase. */
export type KillPoint = string | { restorePhase: string };

function describePoint(point: KillPoint): string {
  return typeof point === "string" ? point : `restore phase ${point.restorePhase}`;
}

/**
 * The start of `point`: reconcile's "step starting" line with that `step`, or restore's "restore
 * phase starting" line with that `phase`.
 */
function startOf(point: KillPoint): (entry: LogEntry) => boolean {
  return typeof point === "string"
    ? (e) => e.msg === "step starting" && e.step === point
    : (e) => e.msg === "restore phase starting" && e.phase === point.restorePhase;
}

/** Resolves when `worker` logs the start of `point` (see startOf). */
export function pointStarted(
  worker: OperatorProcess,
  point: KillPoint,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<void> {
  return logged(worker, startOf(point), `the start of ${describePoint(point)}`, timeoutMs, signal);
}

/** SIGKILLs the only worker and starts a fresh one in its place; returns the fresh one. */
export async function replaceWorker(t: Pick<Target, "operator">): Promise<OperatorProcess> {
  const worker = t.operator.workers[0];
  if (!worker || t.operator.workers.length !== 1) throw new Error("replaceWorker wants exactly one worker");
  await worker.kill("SIGKILL");
  t.operator.workers.splice(0, 1);
  return t.operator.start("worker");
}

/**
 * SIGKILLs the (only) worker as soon as it starts each of `points` in turn, starting a fresh worker
 * after each kill; `trigger` makes the cluster need them. The first kill does not wait for `trigger`
 * to return: a trigger that goes on after its fault (waits for a pod to be gone, stops a writer)
 * must not give the worker time to finish the step.
 */
export async function killWorkerAt(
  t: Target,
  points: readonly KillPoint[],
  trigger: () => Promise<string>,
  timeoutMs = 120_000,
): Promise<FaultReport> {
  const killed: string[] = [];
  const kills: { point: KillPoint; next: OperatorProcess }[] = [];
  let worker = t.operator.workers[0];
  if (!worker || t.operator.workers.length !== 1) throw new Error("killWorkerAt wants exactly one worker");
  const killAt = async (point: KillPoint, started: Promise<void>) => {
    await started;
    worker = await replaceWorker(t);
    killed.push(describePoint(point));
    kills.push({ point, next: worker });
  };
  const [first, ...rest] = points;
  const [what] = await Promise.all([
    trigger(),
    first === undefined ? undefined : killAt(first, pointStarted(worker, first, timeoutMs)),
  ]);
  for (const point of rest) await killAt(point, pointStarted(worker, point, timeoutMs));
  return {
    kind: `kill-worker-at-${points.map((p) => (typeof p === "string" ? p : p.restorePhase)).join("+")}`,
    detail: `${what}; worker SIGKILLed at ${killed.join(", ")}`,
    kills,
  };
}

/**
 * After a kill at `point`: whether the fresh worker started that step (or restore phase) again,
 * i.e. the killed one had not finished it (else the next look found its work done). For steps that
 * recur (upgrade-member, one per member) a start is not proof it was the same one.
 */
export function startedAgain(kill: { point: KillPoint; next: OperatorProcess }): boolean {
  const match = startOf(kill.point);
  return readFileSync(kill.next.logFile, "utf8")
    .split("\n")
    .some((line) => {
      if (!line.startsWith("{")) return false;
      try {
        return match(JSON.parse(line) as LogEntry);
      } catch {
        return false;
      }
    });
}

/** Per kill: "restart-member: started again by the next worker" or "…: done before the kill landed". */
export function killOutcomes(report: FaultReport): string {
  return (report.kills ?? [])
    .map(
      (k) =>
        `${describePoint(k.point)}: ${startedAgain(k) ? "started again by the next worker" : "done before the kill landed"}`,
    )
    .join("; ");
}

/**
 * SIGKILLs the (only) worker as soon as it starts each of `steps` in turn, starting a fresh worker
 * after each kill; `trigger` makes the cluster need those steps.
 */
export function killWorkerAtSteps(
  t: Target,
  steps: readonly string[],
  trigger: () => Promise<string>,
): Promise<FaultReport> {
  return killWorkerAt(t, steps, trigger);
}

/** SIGKILLs the watcher and starts another, while a member pod is deleted. */
export async function killWatcher(t: Target): Promise<FaultReport> {
  await t.operator.watcher.kill("SIGKILL");
  const deleted = await deleteMemberPod(t);
  t.operator.start("watcher");
  return { kind: "kill-watcher", detail: `watcher SIGKILLed; ${deleted.detail} deleted meanwhile` };
}

/** Three workers at once while a member pod is replaced; back to one after. */
export async function threeWorkers(t: Target): Promise<FaultReport & { done(): Promise<void> }> {
  t.operator.start("worker");
  t.operator.start("worker");
  const deleted = await deleteMemberPod(t);
  return {
    kind: "three-workers",
    detail: `3 workers; ${deleted.detail} deleted`,
    async done() {
      // SIGKILL: one may be mid-job; its lease expires and another worker carries on.
      for (const extra of t.operator.workers.splice(1)) await extra.kill("SIGKILL");
    },
  };
}

export async function restartRedis(t: Target): Promise<FaultReport> {
  const deleted = await deleteMemberPod(t);
  await redisDown(t, 2_000);
  return { kind: "restart-redis", detail: `Redis down 2 s right after ${deleted.detail} was deleted` };
}

/** Every Redis server stopped for `ms` and started again with its data. */
async function redisDown(t: Target, ms: number): Promise<void> {
  if (t.sentinel) await t.sentinel.outage(ms);
  else await t.local.restartRedis(ms);
}

/** How long the long Redis outage lasts: minutes in production terms, kept at one here. */
export const REDIS_OUTAGE_MS = 60_000;

/** Redis down for a minute right after a member pod was deleted: nothing heals until it is back. */
export async function redisOutage(t: Target): Promise<FaultReport> {
  const deleted = await deleteMemberPod(t);
  await redisDown(t, REDIS_OUTAGE_MS);
  return {
    kind: "redis-outage",
    detail: `Redis down ${REDIS_OUTAGE_MS / 1000} s right after ${deleted.detail} was deleted`,
  };
}

/**
 * The Sentinel group's primary SIGKILLed right after a member pod was deleted: the sentinels
 * promote a replica and the operator must follow. The killed server rejoins as a replica after
 * the round.
 */
export async function redisFailover(t: Target): Promise<FaultReport & { done(): Promise<void> }> {
  const group = t.sentinel;
  if (!group) throw new Error("redis-failover needs the operator on a Sentinel group");
  const deleted = await deleteMemberPod(t);
  const killed = await group.killPrimary();
  const killedAt = Date.now();
  const promoted = await group.awaitFailover(killed);
  return {
    kind: "redis-failover",
    detail: `Redis primary :${killed} SIGKILLed right after ${deleted.detail} was deleted; :${promoted} promoted in ${Date.now() - killedAt} ms`,
    done: () => group.restart(killed),
  };
}

/** Every key in Redis gone (queues, leases, schedules) right after a member pod was deleted. */
export async function wipeRedis(t: Target): Promise<FaultReport> {
  const redis = connectRedis(
    {
      redisUrl: t.local.redisUrl ?? "",
      ...(t.sentinel
        ? {
            redisSentinel: { sentinels: t.sentinel.sentinels, masterName: t.sentinel.masterName, tls: false },
          }
        : {}),
    },
    { maxRetriesPerRequest: null },
  );
  try {
    const deleted = await deleteMemberPod(t);
    await redis.flushall();
    return { kind: "wipe-redis", detail: `FLUSHALL right after ${deleted.detail} was deleted` };
  } finally {
    redis.disconnect();
  }
}

/**
 * kube-apiserver down for 3 s: every watch drops; the informers resume (or relist). A member pod
 * deleted right after it is back must be seen through the resumed watches.
 */
export async function restartApiserver(t: Target): Promise<FaultReport> {
  await t.local.restartApiserver(3_000);
  await waitFor(
    "the apiserver to answer",
    async () => ((await getCluster(t.c, t.namespace, t.name)) ? true : undefined),
    {
      timeoutMs: 60_000,
    },
  );
  const deleted = await deleteMemberPod(t);
  return { kind: "restart-apiserver", detail: `down 3 s; then ${deleted.detail} deleted` };
}

/** p-th percentile (0–100) of `values`, nearest rank. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] ?? 0;
}

export type Fault = (t: Target) => Promise<FaultReport & { done?(): Promise<void> }>;

/** How long a partition lasts: shorter than the suite's MEMBER_UNHEALTHY_GRACE_MS, so it heals in place. */
export const PARTITION_MS = 10_000;

/** Every other fault class, once each per pass. */
export const OTHER_FAULTS: Record<string, Fault> = {
  "kill-worker-at-step": (t) =>
    killWorkerAtSteps(t, ["remove-member", "add-member", "promote-member"], async () => {
      const deleted = await deleteMemberPod(t);
      return `${deleted.detail} deleted`;
    }),
  "kill-worker-at-ensure-services": (t) =>
    killWorkerAtSteps(t, ["ensure-services"], async () => {
      // The client Service is the operator's to keep: deleting it makes ensure-services run
      // (the resync finds it; the watcher does not watch Services).
      await t.c.core.deleteNamespacedService({ namespace: t.namespace, name: `${t.name}-client` });
      return "client Service deleted";
    }),
  "kill-watcher": killWatcher,
  "three-workers": threeWorkers,
  "restart-redis": restartRedis,
  "wipe-redis": wipeRedis,
  "restart-apiserver": restartApiserver,
  "delete-data-dir": deleteDataDir,
  "partition-member": (t) => partitionMember(t, PARTITION_MS),
};

export interface RoundResult {
  kind: string;
  detail: string;
  /** For kills at steps: whether each killed step was started again after (see killOutcomes). */
  outcomes?: string;
  convergeMs: number;
  /** Acknowledged writes read back after this round. */
  writesChecked: number;
  /** The longest time without an acknowledged write during the round (fault to convergence). */
  longestWriteGapMs: number;
  missing: AcknowledgedWrite[];
}

/**
 * One fault: inject it, wait for convergence (and `also`, see waitConverged) within `boundMs`
 * (throws otherwise), then read back every write acknowledged so far.
 */
export async function runRound(
  t: Target,
  writer: Writer,
  fault: Fault,
  boundMs: number,
  also?: () => Promise<string>,
): Promise<RoundResult> {
  const started = Date.now();
  const report = await fault(t);
  const convergeMs = await waitConverged(t, started, boundMs, also);
  await report.done?.();
  const acknowledged = writer.acknowledged();
  const ended = started + convergeMs;
  let last = started;
  let longestWriteGapMs = 0;
  for (const w of acknowledged) {
    if (w.atMs < started || w.atMs > ended) continue;
    longestWriteGapMs = Math.max(longestWriteGapMs, w.atMs - last);
    last = w.atMs;
  }
  longestWriteGapMs = Math.max(longestWriteGapMs, ended - last);
  const missing = await missingWrites(await endpointsOf(t), acknowledged);
  return {
    kind: report.kind,
    detail: report.detail,
    outcomes: report.kills ? killOutcomes(report) : undefined,
    convergeMs,
    writesChecked: acknowledged.length,
    longestWriteGapMs,
    missing,
  };
}

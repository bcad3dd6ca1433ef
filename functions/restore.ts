// Function: recreate an EtcdCluster from a backup (EtcdRestore). One phase per call; the job
// comes back until the restore is Completed or Failed, and every phase re-reads the world, so a
// worker killed anywhere resumes where it was. Two routes, chosen in Verifying and kept in status:
//
// Staged (the default): the new members are prepared while the old ones still serve.
//   Verifying  find the backup and its metadata (SHA-256, size, revision). Nothing is touched: a
//              missing backup, bad credentials or an unreachable store end the restore here.
//   Staging    mark the EtcdCluster as being restored (the reconcile then keeps off it) and start
//              spec.size seed members whose init containers download the backup, prove its bytes
//              (its SHA-256, else etcd's trailer), `etcdutl snapshot restore` it into their data
//              dirs with the new cluster's membership, and then wait at a start gate. A bad backup
//              or a seed that cannot prepare ends the restore: the seeds go, the cluster is as it was.
//   Replacing  once every seed waits at its gate: delete the old members' pods; once they are
//              gone, let the seeds' etcd start.
// InPlace (when the members must stay on different nodes, or the seeds cannot be placed beside
// the old members): the old members stop first, so the operator reads the whole backup and checks
// it in Verifying before that; Replacing deletes the old members and Seeding starts the seeds at once.
//
//   Seeding    both routes: once a majority of the seeds serves, check the revision against the
//              backup's, wait for the old pods to be gone and lift the mark. (Seeding one member and
//              adding the others took twice as long: each added member receives the whole database
//              again from the leader.)
import type { V1Pod } from "@kubernetes/client-node";
import {
  type EtcdCluster,
  type NormalizedSpec,
  OLD_LOG_DRAINED_ANNOTATION,
  RESTORE_ANNOTATION,
} from "../shared/api/etcd-cluster.ts";
import { CRC32_PATTERN, type EtcdRestore, type EtcdRestoreStatus } from "../shared/api/etcd-restore.ts";
import { validateEtcdClusterSpec } from "../shared/api/validate-etcd-cluster.ts";
import { createEtcdClient, type EtcdClientOptions } from "../shared/etcd-members.ts";
import type { Kube } from "../shared/kube.ts";
import { httpStatusOf } from "../shared/kube-errors.ts";
import type { Logger } from "../shared/log.ts";
import {
  CLIENT_PORT,
  imageOf,
  memberPod,
  membersMustStayApart,
  newMemberName,
} from "../shared/member-pods.ts";
import { clientTlsOn, createMemberPodWithTls, memberPeerURL, withMemberTls } from "../shared/member-tls.ts";
import { type ObjectStore, ObjectStoreError, openStore } from "../shared/object-store/index.ts";
import { bucketPath, sectionOf } from "../shared/object-store/storages.ts";
import { type RestoreSource, restoreSeedPod } from "../shared/restore-pods.ts";
import {
  badBackup,
  failingRepeatedly,
  fetchSucceeded,
  openStartGate,
  seedProblem,
  unschedulable,
  waitingAtStartGate,
} from "../shared/restore-seeds.ts";
import { SnapshotChecksums } from "../shared/snapshot-digest.ts";
import { loadClusterTls, type MemberTlsMaterial, memberMaterial } from "../shared/tls-secrets.ts";
import { type BackupMetadata, META_SUFFIX, restoreCandidate } from "./backup-objects.ts";

/** A seed member that does not serve within this time fails the restore. */
export const SEED_TIMEOUT_MS = 15 * 60_000;
/** The key a seed is read at to learn its revision: any key will do, the answer's header has it. */
const SERVING_PROBE_KEY = "etcd-operator/restore-serving-probe";
const SERVING_PROBE_TIMEOUT_MS = 1_000;
/**
 * How soon a phase that waits looks again: a second while the seeds download, a quarter of one
 * once they are about to be ready, their etcd runs, or old pods are about to be gone.
 */
const WAIT_MS = 1_000;
const WAIT_SHORT_MS = 250;
/** An old member's pod still there this long after its deletion is not about to go. */
const STUCK_STOP_MS = 10_000;

export interface RestoreDeps {
  kube: Kube;
  log: Logger;
  etcd: EtcdClientOptions;
  operatorImage: string;
  /** Throws when this worker no longer holds the cluster's lease. */
  guard(): Promise<void>;
  now?: () => Date;
}

export type RestoreResult =
  | { done: true; status: EtcdRestoreStatus }
  | { done: false; requeueAfterMs: number };

class RestoreFailed extends Error {
  override name = "RestoreFailed";
}

async function readText(store: ObjectStore, key: string): Promise<string | undefined> {
  if (!(await store.head(key))) return undefined;
  const chunks: Buffer[] = [];
  for await (const chunk of await store.download(key)) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks).toString("utf8");
}

const RECORDED_CRC32 = new RegExp(CRC32_PATTERN);

function parseMetadata(text: string | undefined): BackupMetadata | undefined {
  if (text === undefined) return undefined;
  try {
    const parsed = JSON.parse(text) as Partial<BackupMetadata>;
    if (parsed.format !== 1 || typeof parsed.sha256 !== "string") return undefined;
    // A CRC-32 not as a backup writes it is left out: the SHA-256 is then what the seeds check.
    const { crc32, ...rest } = parsed as BackupMetadata;
    return typeof crc32 === "string" && RECORDED_CRC32.test(crc32) ? { ...rest, crc32 } : rest;
  } catch {
    return undefined;
  }
}

/** Reads the whole object and checks it against its metadata and etcd's trailer (the InPlace route). */
async function readAndCheck(
  store: ObjectStore,
  key: string,
  path: string,
  metadata: BackupMetadata | undefined,
): Promise<{ size: number; sha256: string | undefined }> {
  // One pass gives every check: the whole-object SHA-256 and CRC-32 against the backup's metadata
  // (when there is some), and etcd's trailer. The seeds then compare a recorded checksum rather
  // than check the trailer again.
  const checks = new SnapshotChecksums();
  for await (const chunk of await store.download(key)) checks.update(chunk);
  const result = checks.result();
  if (metadata && metadata.sha256 !== result.sha256) {
    throw new RestoreFailed(
      `backup ${path} is corrupt: its SHA-256 is ${result.sha256}, the backup recorded ${metadata.sha256}`,
    );
  }
  if (metadata?.crc32 !== undefined && metadata.crc32 !== result.crc32) {
    throw new RestoreFailed(
      `backup ${path} is corrupt: its CRC-32 is ${result.crc32}, the backup recorded ${metadata.crc32}`,
    );
  }
  if (metadata && metadata.size !== result.size) {
    throw new RestoreFailed(
      `backup ${path} is truncated: ${result.size} bytes, the backup recorded ${metadata.size}`,
    );
  }
  if (!result.trailerValid) {
    throw new RestoreFailed(
      `backup ${path} is corrupt or truncated: etcd's snapshot hash does not match its data`,
    );
  }
  return { size: result.size, sha256: result.sha256 };
}

/**
 * Finds the backup object and its metadata; with `readAll` also reads the whole object and checks
 * it. Returns what the status records. (Staged, the seeds check the bytes as they download them.)
 */
async function locateBackup(
  restore: EtcdRestore,
  deps: RestoreDeps,
  readAll: boolean,
): Promise<EtcdRestoreStatus> {
  const namespace = restore.metadata?.namespace ?? "default";
  const opened = await openStore(restore.spec.backupStorageType, restore.spec, (name) =>
    deps.kube.readSecret(namespace, name),
  );
  const { store } = opened;
  try {
    const objects = await store.list(opened.key);
    const key = restoreCandidate(
      opened.key,
      objects.map((o) => o.key),
    );
    const where = `${store.kind.toLowerCase()}://${store.bucket}/${opened.key}`;
    if (!key) throw new RestoreFailed(`no backup at ${where} (nor periodic backups under that path)`);
    const path = `${store.kind.toLowerCase()}://${store.bucket}/${key}`;
    const metadata = parseMetadata(await readText(store, `${key}${META_SUFFIX}`));
    const checked = readAll ? await readAndCheck(store, key, path, metadata) : undefined;
    const size = checked?.size ?? metadata?.size ?? objects.find((o) => o.key === key)?.size;
    return {
      backupPath: path,
      backupSize: size,
      sha256: checked?.sha256 ?? metadata?.sha256,
      // Only as recorded: the seeds compare it with what the backup wrote.
      crc32: metadata?.crc32,
      backupRevision: metadata?.revision,
    };
  } finally {
    store.close();
  }
}

function seedSource(restore: EtcdRestore, status: EtcdRestoreStatus): RestoreSource {
  const type = restore.spec.backupStorageType;
  return {
    storageType: type,
    // The section as the restore gives it (endpoint, Secret name), naming the very object found.
    section: { ...sectionOf(type, restore.spec), path: bucketPath(status.backupPath ?? "") },
    sha256: status.sha256,
    crc32: status.crc32,
    // The size is checked only with the SHA-256 it was recorded with (the listing's is not a record).
    size: status.sha256 ? status.backupSize : undefined,
  };
}

/**
 * The store's revision from a linearizable read of the member, or undefined while it cannot serve
 * one. Such a read needs a leader, i.e. a majority of the seeds has formed the cluster.
 */
async function servingRevision(endpoint: string, options: EtcdClientOptions): Promise<number | undefined> {
  const client = createEtcdClient(endpoint, options);
  try {
    const answer = await client.kv.range(
      { key: Buffer.from(SERVING_PROBE_KEY), keys_only: true },
      { deadline: new Date(Date.now() + SERVING_PROBE_TIMEOUT_MS) },
    );
    return Number(answer.header.revision);
  } catch {
    return undefined;
  } finally {
    client.close();
  }
}

/**
 * Deletes pods: the old members' (their data is being replaced, so nothing is gained by letting
 * them shut down gracefully: a member's graceful stop, a leader handing over to peers that are
 * stopping too, took 7–8 s of a restore) or seeds given up. One second, then SIGKILL (etcd's data
 * dir is crash-safe), and not 0, which would remove the pod object before its process is gone.
 */
async function stopPods(pods: readonly V1Pod[], namespace: string, deps: RestoreDeps): Promise<void> {
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    await deps.guard();
    await deps.kube.deletePod(namespace, pod.metadata?.name ?? "", { gracePeriodSeconds: 1 });
  }
}

/** Whether the pod's etcd container is running (its init containers are done). */
function etcdRunning(pod: V1Pod): boolean {
  return (pod.status?.containerStatuses ?? []).some((c) => c.name === "etcd" && c.state?.running);
}

/** Whether the API refused a pod for the namespace's ResourceQuota (403 "exceeded quota"). */
function refusedByQuota(error: unknown): boolean {
  if (httpStatusOf(error) !== 403) return false;
  const body = typeof error === "object" && error !== null && "body" in error ? String(error.body) : "";
  return /exceeded quota|forbidden: exceeded/i.test(`${body} ${error instanceof Error ? error.message : ""}`);
}

interface SeedPlan {
  names: string[];
  initialCluster: { name: string; peerURL: string }[];
}

function seedPlan(
  status: EtcdRestoreStatus,
  clusterName: string,
  namespace: string,
  spec: NormalizedSpec,
): SeedPlan {
  // A restore started by an operator that seeded one member has only `seedMember`.
  const names = status.seedMembers?.length ? status.seedMembers : [status.seedMember ?? ""];
  return {
    names,
    initialCluster: names.map((name) => ({
      name,
      peerURL: memberPeerURL(spec, name, clusterName, namespace),
    })),
  };
}

/** Creates the seeds that do not exist yet (with a start gate while old members may serve). */
async function createSeeds(
  restore: EtcdRestore,
  cluster: EtcdCluster,
  spec: NormalizedSpec,
  plan: SeedPlan,
  existing: readonly V1Pod[],
  gated: boolean,
  memberTls: MemberTlsMaterial | undefined,
  deps: RestoreDeps,
): Promise<string[]> {
  const uid = restore.metadata?.uid ?? "";
  const status = restore.status ?? {};
  const clusterName = cluster.metadata?.name ?? "";
  const created: string[] = [];
  for (const member of plan.initialCluster) {
    if (existing.some((pod) => pod.metadata?.name === member.name)) continue;
    await deps.guard();
    const base = memberPod({
      cluster,
      spec,
      name: member.name,
      initialCluster: plan.initialCluster,
      state: "new",
    });
    const pod = restoreSeedPod({
      pod: withMemberTls(base, memberTls),
      source: seedSource(restore, status),
      operatorImage: deps.operatorImage,
      etcdImage: imageOf(spec),
      memberName: member.name,
      peerURL: member.peerURL,
      initialCluster: plan.initialCluster,
      clusterToken: `${clusterName}-restore-${uid}`,
      startToken: gated ? uid : undefined,
    });
    await createMemberPodWithTls(deps.kube, cluster, spec, pod, memberTls);
    created.push(member.name);
  }
  if (created.length > 0) {
    await deps.kube.event(
      cluster,
      "Normal",
      "RestoreSeedCreated",
      `seed member${created.length > 1 ? "s" : ""} ${created.join(", ")} ${gated ? "prepare" : "start"}${created.length > 1 ? "" : "s"} from ${status.backupPath}${gated ? " while the members serve" : ""}`,
    );
  }
  return created;
}

export async function restoreStep(restore: EtcdRestore, deps: RestoreDeps): Promise<RestoreResult> {
  const now = deps.now ?? (() => new Date());
  const namespace = restore.metadata?.namespace ?? "default";
  const clusterName = restore.spec.etcdCluster.name;
  const status = restore.status ?? {};
  // With the cluster given, its restore mark (when `marked`: as read, unless set since) is lifted.
  const fail = async (
    message: string,
    cluster?: EtcdCluster,
    marked = Boolean(cluster?.metadata?.annotations?.[RESTORE_ANNOTATION]),
  ): Promise<RestoreResult> => {
    const failed: EtcdRestoreStatus = {
      ...status,
      phase: "Failed",
      succeeded: false,
      reason: message,
      completionTime: now().toISOString(),
    };
    await deps.kube.patchRestoreStatus(restore, failed);
    await deps.kube.event(restore, "Warning", "RestoreFailed", message);
    if (cluster && marked) {
      await deps.kube.event(
        cluster,
        "Warning",
        "RestoreFailed",
        `restore ${restore.metadata?.name}: ${message}`,
      );
      await deps.kube.annotateCluster(cluster, { [RESTORE_ANNOTATION]: null });
    }
    return { done: true, status: failed };
  };
  if (status.phase === "Completed" || status.phase === "Failed") return { done: true, status };
  // Names the phase before it reads or changes anything, like reconcile's "step starting": a worker
  // killed mid-phase leaves this line as the record of what it was doing (the chaos suite kills
  // workers on it).
  const log = deps.log.child({ phase: status.phase ?? "Verifying" });
  log.debug("restore phase starting");

  const cluster = await deps.kube.getCluster(namespace, clusterName);
  if (!cluster)
    return fail(`EtcdCluster ${namespace}/${clusterName} not found: create it first, then the restore`);
  const validation = validateEtcdClusterSpec(cluster.spec ?? {});
  if (!validation.ok)
    return fail(`EtcdCluster ${clusterName} has an invalid spec: ${validation.problems.join("; ")}`);
  const spec = validation.spec;
  // A TLS cluster's seeds get the cluster's certificates as any new member does, and the operator
  // reads them over TLS. The Secrets are checked on every look, as the reconcile does: before
  // anything is replaced a bad one fails the restore; later it holds the restore until fixed.
  let memberTls: MemberTlsMaterial | undefined;
  let etcd = deps.etcd;
  if (spec.TLS?.static) {
    const tls = await loadClusterTls(
      (ns, secret) => deps.kube.readSecret(ns, secret),
      clusterName,
      namespace,
      spec,
      now().getTime(),
    );
    if (!tls.ok) {
      const message = `the TLS Secrets of EtcdCluster ${clusterName} cannot be used: ${tls.problems.join("; ")}`;
      if (!status.phase || status.phase === "Verifying") return fail(`${message}; nothing was changed`);
      if (status.reason !== message) await deps.kube.patchRestoreStatus(restore, { reason: message });
      return { done: false, requeueAfterMs: WAIT_MS };
    }
    memberTls = memberMaterial(tls.value);
    if (tls.value.client) etcd = { ...deps.etcd, tls: tls.value.client };
  }
  const uid = restore.metadata?.uid ?? "";

  if (!status.phase || status.phase === "Verifying") {
    const startTime = status.startTime ?? now().toISOString();
    const route = status.route ?? (membersMustStayApart(spec.pod) ? "InPlace" : "Staged");
    await deps.kube.patchRestoreStatus(restore, { phase: "Verifying", startTime, route });
    try {
      const located = await locateBackup(restore, deps, route === "InPlace");
      const check = located.sha256 ? `sha256 ${located.sha256.slice(0, 12)}…` : "etcd's snapshot hash";
      const size = located.backupSize === undefined ? "" : `${located.backupSize} bytes, `;
      // The backup's Event on the restore, and the start of the restore on the cluster.
      const announce = async (reason: string, message: string): Promise<RestoreResult> => {
        log.info({ backup: located.backupPath }, message);
        await deps.kube.event(restore, "Normal", reason, message);
        await deps.kube.event(
          cluster,
          "Normal",
          "RestoreStarted",
          `restore ${restore.metadata?.name}: ${message}`,
        );
        return { done: false, requeueAfterMs: 0 };
      };
      if (route === "Staged") {
        const seedMembers = Array.from({ length: spec.size }, () => newMemberName(clusterName));
        await deps.kube.patchRestoreStatus(restore, {
          ...located,
          phase: "Staging",
          seedMember: seedMembers[0],
          seedMembers,
          reason: "",
        });
        return announce(
          "BackupFound",
          `backup ${located.backupPath} found (${size}checked by each new member: ${check}); the members of ${clusterName} serve until the new ones are ready`,
        );
      }
      await deps.kube.patchRestoreStatus(restore, { ...located, phase: "Replacing", reason: "" });
      return announce(
        "BackupVerified",
        `backup ${located.backupPath} verified (${size}${check}); replacing the members of ${clusterName} (they must stay on different nodes: they stop first)`,
      );
    } catch (error) {
      if (error instanceof RestoreFailed || error instanceof ObjectStoreError) return fail(error.message);
      throw error;
    }
  }

  const plan = seedPlan(status, clusterName, namespace, spec);
  const started = Date.parse(status.startTime ?? now().toISOString());
  const elapsedMs = now().getTime() - started;

  if (status.phase === "Staging") {
    await deps.guard();
    if (cluster.metadata?.annotations?.[RESTORE_ANNOTATION] !== uid) {
      await deps.kube.annotateCluster(cluster, { [RESTORE_ANNOTATION]: uid });
    }
    const memberPods = await deps.kube.listMemberPods(namespace, clusterName);
    const seeds = memberPods.filter((pod) => plan.names.includes(pod.metadata?.name ?? ""));
    // Ends the restore before anything of the cluster was touched: the seeds go, the mark is lifted.
    const giveUp = async (message: string): Promise<RestoreResult> => {
      await stopPods(seeds, namespace, deps);
      return fail(`${message}; the cluster was not changed`, cluster, true);
    };
    // The seeds cannot be placed beside the old members: restore in place instead, the backup
    // checked by the operator first (the route InPlace takes from the start).
    const inPlace = async (why: string): Promise<RestoreResult> => {
      await stopPods(seeds, namespace, deps);
      await deps.kube.annotateCluster(cluster, { [RESTORE_ANNOTATION]: null });
      const message = `${why}: restoring in place instead (the old members stop first, after the operator has checked the backup)`;
      await deps.kube.patchRestoreStatus(restore, {
        phase: "Verifying",
        route: "InPlace",
        seedMember: null,
        seedMembers: null,
        reason: message,
      });
      log.warn(message);
      await deps.kube.event(restore, "Warning", "RestoreInPlace", message);
      return { done: false, requeueAfterMs: 0 };
    };
    try {
      if ((await createSeeds(restore, cluster, spec, plan, seeds, true, memberTls, deps)).length > 0)
        return { done: false, requeueAfterMs: WAIT_MS };
    } catch (error) {
      if (refusedByQuota(error))
        return inPlace(`the namespace's ResourceQuota refused the new members beside the old ones`);
      throw error;
    }
    for (const seed of seeds) {
      const name = seed.metadata?.name ?? "";
      const bad = badBackup(seed);
      if (bad) return giveUp(bad);
      const failing = failingRepeatedly(seed);
      if (failing) return giveUp(`seed member ${name} could not prepare the backup: ${failing}`);
      const noRoom = unschedulable(seed);
      if (noRoom) return inPlace(`seed member ${name} fits on no node beside the old members (${noRoom})`);
    }
    if (elapsedMs > SEED_TIMEOUT_MS) {
      const problem = seeds.map(seedProblem).find((p) => p !== undefined);
      return giveUp(
        `the seed members were not ready within ${SEED_TIMEOUT_MS / 60_000} minutes${problem ? `: ${problem}` : ""}`,
      );
    }
    if (seeds.length === plan.names.length && seeds.every(waitingAtStartGate)) {
      await deps.kube.patchRestoreStatus(restore, { phase: "Replacing", reason: "" });
      const message = `every seed member has its restored data in place; the old members of ${clusterName} stop now`;
      log.info(message);
      await deps.kube.event(restore, "Normal", "SeedsReady", message);
      return { done: false, requeueAfterMs: 0 };
    }
    const problem = seeds.map(seedProblem).find((p) => p !== undefined);
    if (problem && problem !== status.reason)
      await deps.kube.patchRestoreStatus(restore, { reason: problem });
    return { done: false, requeueAfterMs: seeds.every(fetchSucceeded) ? WAIT_SHORT_MS : WAIT_MS };
  }

  if (status.phase === "Replacing") {
    await deps.guard();
    if (cluster.metadata?.annotations?.[RESTORE_ANNOTATION] !== uid) {
      if (status.route !== "InPlace" && status.route !== undefined)
        return fail(`the cluster's ${RESTORE_ANNOTATION} annotation no longer names this restore`);
      await deps.kube.annotateCluster(cluster, { [RESTORE_ANNOTATION]: uid });
    }
    const memberPods = await deps.kube.listMemberPods(namespace, clusterName);
    if (status.route === "Staged") {
      const oldMembers = memberPods.filter((pod) => !plan.names.includes(pod.metadata?.name ?? ""));
      await stopPods(oldMembers, namespace, deps);
      if (oldMembers.length > 0) {
        // Normally gone within a second or two. A pod on a node that no longer answers stays
        // Terminating until someone force-deletes it: the status says which, and the wait slows.
        const names = oldMembers.map((pod) => pod.metadata?.name ?? "").join(", ");
        const waiting = `the new members are ready; waiting for the old members' pods to be gone: ${names}`;
        if (status.reason !== waiting) await deps.kube.patchRestoreStatus(restore, { reason: waiting });
        return { done: false, requeueAfterMs: stuck(oldMembers, now()) ? WAIT_MS : WAIT_SHORT_MS };
      }
      // Seeding lets the seeds' etcd start.
      await deps.kube.patchRestoreStatus(restore, { phase: "Seeding", reason: "" });
      return { done: false, requeueAfterMs: 0 };
    }
    await stopPods(
      memberPods.filter((pod) => !plan.names.includes(pod.metadata?.name ?? "")),
      namespace,
      deps,
    );
    const seedMembers =
      status.seedMembers ?? Array.from({ length: spec.size }, () => newMemberName(clusterName));
    await deps.kube.patchRestoreStatus(restore, {
      phase: "Seeding",
      seedMember: seedMembers[0],
      seedMembers,
    });
    return { done: false, requeueAfterMs: 0 };
  }

  // Seeding
  if (cluster.metadata?.annotations?.[RESTORE_ANNOTATION] !== uid) {
    // The mark was lifted by hand or by another restore: this one no longer owns the cluster.
    return fail(`the cluster's ${RESTORE_ANNOTATION} annotation no longer names this restore`);
  }
  // InPlace, the seeds start while the old members stop (Replacing asked them to; asked again
  // after a restart): a download takes far longer than their 1 s grace period, and the restore
  // completes only once every old member is gone. Old and new members cannot talk: the seeds have
  // names and a cluster token of their own. Staged, the old members are gone already.
  // One list per look gives both the old members and the seeds already created.
  const memberPods = await deps.kube.listMemberPods(namespace, clusterName);
  const oldMembers = memberPods.filter((pod) => !plan.names.includes(pod.metadata?.name ?? ""));
  await stopPods(oldMembers, namespace, deps);
  const pods = memberPods.filter((pod) => plan.names.includes(pod.metadata?.name ?? ""));
  // A seed missing now (deleted by hand, its node lost) starts ungated: the old members are gone
  // or going, as they are for every seed InPlace.
  const created = await createSeeds(restore, cluster, spec, plan, pods, false, memberTls, deps);
  if (created.length > 0) return { done: false, requeueAfterMs: WAIT_MS };
  if (oldMembers.length === 0) {
    for (const pod of pods.filter(waitingAtStartGate)) {
      const ip = pod.status?.podIP;
      if (!ip) continue;
      await deps.guard();
      if (await openStartGate(ip, uid))
        log.info({ seed: pod.metadata?.name }, "seed member's etcd let start");
    }
  }
  // Ready means etcd's /health passed, which needs a leader: a majority of the seeds has formed
  // the cluster. (A linearizable read of one seed says as much up to 2 s sooner, but the cluster
  // is then handed back to the reconcile while seeds may still be starting: waiting for Ready keeps
  // its first look at the restored members a look at serving ones.) A seed that never comes up is
  // then the ordinary reconcile's to replace.
  const serving = pods.filter(
    (pod) =>
      pod.status?.podIP && pod.status.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
  );
  const quorum = Math.floor(plan.initialCluster.length / 2) + 1;
  let revision: number | undefined;
  const scheme = clientTlsOn(spec) ? "https" : "http";
  for (const pod of serving.length >= quorum ? serving : []) {
    revision = await servingRevision(`${scheme}://${pod.status?.podIP}:${CLIENT_PORT}`, etcd);
    if (revision !== undefined) break;
  }
  // Once a seed's etcd runs (or waits at its gate), its readiness is at most moments away: looked at often.
  const soon = pods.some((pod) => etcdRunning(pod) || waitingAtStartGate(pod));
  const seedMember = plan.names.join(", ");
  if (revision === undefined) {
    const problem = pods.map(seedProblem).find((p) => p !== undefined);
    if (elapsedMs > SEED_TIMEOUT_MS) {
      return fail(
        `seed member(s) ${seedMember} did not serve within ${SEED_TIMEOUT_MS / 60_000} minutes${problem ? `: ${problem}` : ""}`,
        cluster,
      );
    }
    if (problem && problem !== status.reason)
      await deps.kube.patchRestoreStatus(restore, { reason: problem });
    return { done: false, requeueAfterMs: soon ? WAIT_SHORT_MS : WAIT_MS };
  }
  if (status.backupRevision !== undefined && revision < status.backupRevision) {
    return fail(
      `the restored member reports revision ${revision}, below the backup's ${status.backupRevision}`,
      cluster,
    );
  }
  if (oldMembers.length > 0) {
    const names = oldMembers.map((pod) => pod.metadata?.name ?? "").join(", ");
    const waiting = `the restored members serve; waiting for the old members' pods to be gone: ${names}`;
    if (status.reason !== waiting) await deps.kube.patchRestoreStatus(restore, { reason: waiting });
    return { done: false, requeueAfterMs: stuck(oldMembers, now()) ? WAIT_MS : WAIT_SHORT_MS };
  }
  await deps.guard();
  // The restored members' logs start afresh: a later 3.6 → 3.7 upgrade drains them again.
  await deps.kube.annotateCluster(cluster, {
    [RESTORE_ANNOTATION]: null,
    [OLD_LOG_DRAINED_ANNOTATION]: null,
  });
  const completed: EtcdRestoreStatus = {
    ...status,
    phase: "Completed",
    succeeded: true,
    reason: "",
    restoredRevision: revision,
    completionTime: now().toISOString(),
  };
  await deps.kube.patchRestoreStatus(restore, completed);
  const seconds = (elapsedMs / 1000).toFixed(1);
  const message = `cluster ${clusterName} restored from ${status.backupPath} at revision ${revision} in ${seconds} s with ${plan.initialCluster.length} member(s)${plan.initialCluster.length < spec.size ? `; members are added up to size ${spec.size}` : ""}`;
  log.info({ revision }, message);
  await deps.kube.event(restore, "Normal", "RestoreSucceeded", message);
  await deps.kube.event(cluster, "Normal", "RestoreSucceeded", message);
  return { done: true, status: completed };
}

/** Whether every one of these deleted pods has been going for longer than a stop takes. */
function stuck(pods: readonly V1Pod[], at: Date): boolean {
  return pods.every(
    (pod) => at.getTime() - Date.parse(String(pod.metadata?.deletionTimestamp ?? "")) > STUCK_STOP_MS,
  );
}

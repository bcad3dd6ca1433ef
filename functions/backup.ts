// Function: take one backup for an EtcdBackup. A snapshot streams from a healthy member (a
// follower when there is one, so the leader keeps its disk and network for writes) through a
// digest into the object store, never held whole in memory. etcd's own trailer hash is checked on
// the way, the object's size is checked after, and a small metadata file with the SHA-256, the
// revision and the etcd version is written next to it, so a restore can verify the backup before
// it deletes anything. Periodic backups then prune the oldest beyond maxBackups.
import { pipeline } from "node:stream/promises";
import type { EtcdBackup } from "../shared/api/etcd-backup.ts";
import { resolveClientEndpoints } from "../shared/client-endpoints.ts";
import { CommitGate } from "../shared/commit-gate.ts";
import { findCondition, setCondition } from "../shared/conditions.ts";
import { countKeys } from "../shared/etcd-maintenance.ts";
import { type EtcdClientOptions, endpointStatuses, leaderId } from "../shared/etcd-members.ts";
import { openSnapshot } from "../shared/etcd-snapshot.ts";
import type { Kube } from "../shared/kube.ts";
import { LeaseLostError } from "../shared/lease.ts";
import type { Logger } from "../shared/log.ts";
import { clientServiceName } from "../shared/member-pods.ts";
import { type ObjectStore, ObjectStoreError, openStore } from "../shared/object-store/index.ts";
import { SnapshotDigest } from "../shared/snapshot-digest.ts";
import { checkSecret, OPERATOR_KEYS } from "../shared/tls-secrets.ts";
import {
  type BackupMetadata,
  backupsToPrune,
  META_SUFFIX,
  periodicBackups,
  periodicKey,
} from "./backup-objects.ts";
import { type Verification, verifyBackup } from "./verify-backup.ts";

export interface BackupDeps {
  kube: Kube;
  log: Logger;
  etcd: EtcdClientOptions;
  now?: () => Date;
  /** The operator's image, for a verification pod's init containers (spec.verification). */
  operatorImage?: string;
  /**
   * Throws (LeaseLostError) once another run of this backup owns it. Checked before every write
   * (the upload's last bytes, the metadata, deletions, the status): two runs of one backup, e.g.
   * after Redis lost its data mid-upload, must never leave an object and a record of different runs.
   */
  guard?: () => Promise<void>;
}

const unguarded = async (): Promise<void> => {};

export interface BackupRecord {
  /** "s3://bucket/key" */
  path: string;
  key: string;
  size: number;
  sha256: string;
  revision: number;
  /** Keys in the store at `revision`; undefined when the revision was compacted meanwhile. */
  keyCount?: number;
  etcdVersion: string;
  member: string;
  /** The EtcdCluster the endpoints belong to, when they are one's client Service or pods. */
  cluster?: string;
  crc32?: string;
  durationSeconds: number;
  /** Periodic backups: how many the store holds after pruning. */
  kept?: number;
  pruned: string[];
}

/** A problem with the EtcdBackup itself: retrying cannot help until someone edits it. */
export class BackupSpecError extends Error {
  override name = "BackupSpecError";
}

/** Why a backup failed, as a condition reason. */
export function failureReason(error: unknown): string {
  if (error instanceof ObjectStoreError) return error.code === "StoreError" ? "ObjectStoreError" : error.code;
  if (error instanceof BackupSpecError) return "InvalidSpec";
  if (error instanceof SnapshotError) return "SnapshotFailed";
  return "BackupFailed";
}

export class SnapshotError extends Error {
  override name = "SnapshotError";
}

export function isPeriodic(backup: EtcdBackup): boolean {
  return (backup.spec.backupPolicy?.backupIntervalInSecond ?? 0) > 0;
}

/** Picks the member to snapshot: a healthy follower, else the healthy leader. */
async function chooseMember(
  endpoints: string[],
  options: EtcdClientOptions,
): Promise<{ endpoint: string; memberId: string }> {
  const statuses = await endpointStatuses(endpoints, options);
  const healthy = statuses.filter((s) => s.ok && !s.isLearner && (s.errors ?? []).length === 0 && s.memberId);
  const leader = leaderId(statuses);
  const chosen = healthy.find((s) => s.memberId !== leader) ?? healthy[0];
  if (!chosen?.memberId) {
    const why = statuses.map((s) => `${s.endpoint}: ${s.ok ? "unhealthy" : s.error}`).join("; ");
    throw new SnapshotError(`no healthy etcd member to take the snapshot from (${why || "no endpoints"})`);
  }
  return { endpoint: chosen.endpoint, memberId: chosen.memberId };
}

/**
 * Streams one snapshot into the store. The object's name may depend on the revision, which is
 * known once the snapshot is open, hence `keyFor`.
 */
async function streamSnapshot(
  store: ObjectStore,
  keyFor: (revision: number) => string,
  endpoint: string,
  options: EtcdClientOptions,
  timeoutMs: number | undefined,
  guard: () => Promise<void>,
): Promise<{
  key: string;
  size: number;
  sha256: string;
  crc32: string | undefined;
  revision: number;
  etcdVersion: string;
}> {
  const snapshot = await openSnapshot(endpoint, options);
  const key = keyFor(snapshot.revision);
  const digest = new SnapshotDigest();
  const gate = new CommitGate(guard);
  const timer = timeoutMs
    ? setTimeout(
        () => snapshot.stream.destroy(new SnapshotError(`the backup took longer than ${timeoutMs / 1000} s`)),
        timeoutMs,
      )
    : undefined;
  try {
    // The upload consumes the gate's output; pipeline carries errors both ways and ends the
    // snapshot stream if the upload fails. The announced size lets S3 take it in one request.
    await Promise.all([pipeline(snapshot.stream, digest, gate), store.upload(key, gate, snapshot.size)]);
  } catch (error) {
    if (gate.refused) throw gate.refused;
    // A backup's first upload to its key creates it only if still absent: another run of this
    // backup that got there first keeps it, and this older snapshot stops here.
    if (error instanceof ObjectStoreError && error.code === "ObjectExists")
      throw new LeaseLostError(error.message, { cause: error });
    throw error;
  } finally {
    clearTimeout(timer);
    snapshot.close();
  }
  const result = digest.result();
  if (!result.trailerValid || result.sha256 === undefined) {
    await guard();
    await store.remove([key]).catch(() => undefined);
    throw new SnapshotError(
      `the snapshot from ${endpoint} failed etcd's integrity check (${result.size} bytes); the object was deleted`,
    );
  }
  return {
    key,
    size: result.size,
    sha256: result.sha256,
    crc32: result.crc32,
    revision: snapshot.revision,
    etcdVersion: snapshot.etcdVersion,
  };
}

/**
 * The etcd client options for a cluster that serves clients over TLS: the client certificate of
 * `spec.clientTLSSecret` (coreos key names etcd-client.crt/.key/-ca.crt, or cert-manager's), checked
 * first like the cluster's own Secrets; the member's certificate is checked against the client
 * Service's name (`<cluster>-client.<ns>.svc`), since we dial its IP.
 */
async function clientOptions(
  backup: EtcdBackup,
  deps: BackupDeps,
  namespace: string,
  clusterName: string | undefined,
): Promise<EtcdClientOptions> {
  const secretName = backup.spec.clientTLSSecret;
  if (!secretName) return deps.etcd;
  const checked = checkSecret(
    await deps.kube.readSecret(namespace, secretName),
    {
      field: "spec.clientTLSSecret",
      namespace,
      name: secretName,
      keys: OPERATOR_KEYS,
      dnsNames: [],
      usages: ["client"],
    },
    (deps.now ?? (() => new Date()))().getTime(),
  );
  if (!checked.ok) throw new BackupSpecError(checked.problems.join("; "));
  const serverName = clusterName
    ? `${clientServiceName(clusterName)}.${namespace}.svc`
    : new URL(backup.spec.etcdEndpoints?.[0] ?? "https://localhost").hostname;
  return { ...deps.etcd, tls: { ...checked.value, serverName } };
}

/** Takes one backup as the EtcdBackup describes; throws on failure (nothing partial is left). */
export async function runBackup(backup: EtcdBackup, deps: BackupDeps): Promise<BackupRecord> {
  const now = deps.now ?? (() => new Date());
  const guard = deps.guard ?? unguarded;
  const started = now();
  const namespace = backup.metadata?.namespace ?? "default";
  const urls = backup.spec.etcdEndpoints ?? [];
  if (urls.length === 0) {
    throw new BackupSpecError(
      'spec.etcdEndpoints is empty: list the cluster\'s client URL, e.g. ["http://example-etcd-cluster-client:2379"]',
    );
  }
  const { store, key: baseKey } = await openStore(backup.spec.storageType, backup.spec, (name) =>
    deps.kube.readSecret(namespace, name),
  ).catch((error: unknown) => {
    if (error instanceof ObjectStoreError && error.code === "InvalidPath")
      throw new BackupSpecError(error.message, { cause: error });
    throw error;
  });
  try {
    // Fails early (before a snapshot is taken) on a missing bucket, bad credentials or a store that is down.
    const existing = await store.list(baseKey);
    const resolved = await resolveClientEndpoints(deps.kube, namespace, urls);
    if (resolved.endpoints.length === 0) {
      throw new SnapshotError(`no ready etcd member behind ${urls.join(", ")}`);
    }
    const etcd = await clientOptions(backup, deps, namespace, resolved.clusterName);
    const member = await chooseMember(resolved.endpoints, etcd);
    const memberName = resolved.podNames[member.endpoint] ?? member.endpoint;
    const periodic = isPeriodic(backup);
    const clusterName = resolved.clusterName ?? "etcd";
    const timeoutSeconds = backup.spec.backupPolicy?.timeoutInSecond;
    deps.log.info({ member: memberName, periodic }, "backup started");
    const taken = await streamSnapshot(
      store,
      (revision) => (periodic ? periodicKey(baseKey, clusterName, revision, started) : baseKey),
      member.endpoint,
      etcd,
      timeoutSeconds ? timeoutSeconds * 1000 : undefined,
      guard,
    );
    const key = taken.key;
    const stored = await store.head(key);
    if (!stored || stored.size !== taken.size) {
      await guard();
      await store.remove([key]).catch(() => undefined);
      throw new ObjectStoreError(
        "StoreError",
        `the store holds ${stored?.size ?? "no"} bytes at ${key} after an upload of ${taken.size}; the object was deleted`,
      );
    }
    // What a verification compares the restored store with.
    const keyCount = await countKeys(member.endpoint, taken.revision, etcd);
    const metadata: BackupMetadata = {
      format: 1,
      sha256: taken.sha256,
      crc32: taken.crc32,
      size: taken.size,
      revision: taken.revision,
      etcdVersion: taken.etcdVersion,
      keyCount,
      cluster: clusterName,
      namespace,
      member: memberName,
      backup: backup.metadata?.name ?? "",
      createdAt: started.toISOString(),
    };
    await guard();
    await store.putText(`${key}${META_SUFFIX}`, JSON.stringify(metadata));
    let pruned: string[] = [];
    let kept: number | undefined;
    if (periodic) {
      const after = [...existing.map((o) => o.key), key];
      pruned = backupsToPrune(baseKey, after, backup.spec.backupPolicy?.maxBackups ?? 0, key);
      if (pruned.length > 0) {
        await guard();
        await store.remove(pruned.flatMap((k) => [k, `${k}${META_SUFFIX}`]));
      }
      kept = periodicBackups(baseKey, after).length - pruned.length;
    }
    const durationSeconds = (now().getTime() - started.getTime()) / 1000;
    return {
      path: `${store.kind.toLowerCase()}://${store.bucket}/${key}`,
      key,
      size: taken.size,
      sha256: taken.sha256,
      revision: taken.revision,
      keyCount,
      etcdVersion: taken.etcdVersion,
      member: memberName,
      cluster: resolved.clusterName,
      crc32: taken.crc32,
      durationSeconds,
      kept,
      pruned,
    };
  } finally {
    store.close();
  }
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** The verification's outcome; one that could not run (no image, the API refused the pod) is a failed one. */
async function verify(backup: EtcdBackup, record: BackupRecord, deps: BackupDeps): Promise<Verification> {
  try {
    const operatorImage = deps.operatorImage;
    if (!operatorImage)
      throw new Error("this operator process has no operator image to run the verification pod with");
    return await verifyBackup(backup, record, { ...deps, operatorImage });
  } catch (error) {
    deps.log.warn({ err: error, path: record.path }, "backup verification could not run");
    return {
      succeeded: false,
      time: new Date().toISOString(),
      backupPath: record.path,
      message: `the verification could not run: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
}

/**
 * Restores the backup just taken in a throwaway pod and records the outcome. A failed verification
 * does not fail the backup (its object is in the store either way): it is reported in
 * status.verification, a Warning Event and the verification gauge, and lastVerified stays put.
 */
async function verifyAndReport(backup: EtcdBackup, record: BackupRecord, deps: BackupDeps): Promise<void> {
  const verification = await verify(backup, record, deps);
  await deps.kube.patchBackupStatus(backup, {
    verification,
    ...(verification.succeeded ? { lastVerified: verification.time } : {}),
  });
  deps.log.info({ path: record.path, succeeded: verification.succeeded }, verification.message);
  await deps.kube.event(
    backup,
    verification.succeeded ? "Normal" : "Warning",
    verification.succeeded ? "BackupVerified" : "BackupVerificationFailed",
    `${record.path}: ${verification.message}`,
  );
}

/** A one-shot backup already taken for the current spec needs no second run (e.g. after a restart). */
export function alreadyDone(backup: EtcdBackup): boolean {
  if (isPeriodic(backup)) return false;
  const succeeded = findCondition(backup.status?.conditions, "Succeeded");
  return succeeded?.status === "True" && succeeded.observedGeneration === backup.metadata?.generation;
}

/**
 * Whether a one-shot backup's last run, succeeded or failed, was for its current spec: asking for
 * it again then would only repeat that run (a spec that fails for good would fail in a loop).
 */
export function lastRunIsCurrent(backup: EtcdBackup): boolean {
  const succeeded = findCondition(backup.status?.conditions, "Succeeded");
  return succeeded !== undefined && succeeded.observedGeneration === backup.metadata?.generation;
}

export type BackupJobResult =
  | { kind: "gone" }
  | { kind: "skipped"; why: string }
  | { kind: "done"; record: BackupRecord };

/**
 * The job: one backup, its status and its Event. A failure is recorded (status, condition, Event)
 * and thrown again, so the queue retries it with back-off; BackupSpecError means retrying cannot help.
 */
export async function backupJob(
  input: { namespace: string; name: string; reason?: string },
  deps: BackupDeps,
): Promise<BackupJobResult> {
  const now = deps.now ?? (() => new Date());
  const guard = deps.guard ?? unguarded;
  const backup = await deps.kube.getBackup(input.namespace, input.name);
  if (!backup || backup.metadata?.deletionTimestamp) return { kind: "gone" };
  if (input.reason !== "manual" && alreadyDone(backup)) return { kind: "skipped", why: "already backed up" };
  const generation = backup.metadata?.generation;
  try {
    const record = await runBackup(backup, deps);
    const at = now();
    await guard();
    await deps.kube.patchBackupStatus(backup, {
      succeeded: true,
      reason: "",
      etcdVersion: record.etcdVersion,
      etcdRevision: record.revision,
      keyCount: record.keyCount,
      lastSuccessDate: at.toISOString(),
      lastAttemptDate: at.toISOString(),
      backupPath: record.path,
      backupSize: record.size,
      sha256: record.sha256,
      durationSeconds: Math.round(record.durationSeconds * 1000) / 1000,
      memberName: record.member,
      backupCount: record.kept,
      conditions: setCondition(
        backup.status?.conditions,
        {
          type: "Succeeded",
          status: "True",
          reason: "BackupSucceeded",
          message: `revision ${record.revision} saved to ${record.path}`,
          observedGeneration: generation,
        },
        at,
      ),
    });
    const pruned = record.pruned.length > 0 ? `; pruned ${record.pruned.length} older backup(s)` : "";
    const message = `backed up revision ${record.revision} (${mib(record.size)}, etcd ${record.etcdVersion}) from ${record.member} to ${record.path} in ${record.durationSeconds.toFixed(1)} s${pruned}`;
    deps.log.info({ path: record.path, size: record.size, revision: record.revision }, message);
    await deps.kube.event(backup, "Normal", "BackupSucceeded", message);
    if (backup.spec.verification?.enabled) {
      await guard();
      await verifyAndReport(backup, record, deps);
    }
    return { kind: "done", record };
  } catch (error) {
    // Another run owns the backup now and records its own outcome: this one leaves no trace.
    if (error instanceof LeaseLostError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    const reason = failureReason(error);
    const at = now();
    await deps.kube.patchBackupStatus(backup, {
      succeeded: false,
      reason: message,
      lastAttemptDate: at.toISOString(),
      conditions: setCondition(
        backup.status?.conditions,
        { type: "Succeeded", status: "False", reason, message, observedGeneration: generation },
        at,
      ),
    });
    await deps.kube.event(backup, "Warning", "BackupFailed", message);
    throw error;
  }
}

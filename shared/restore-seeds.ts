// What a restore's seed pods say about themselves (their init containers, scheduling), read by the
// restore function at every look, and the call that lets a prepared seed's etcd start.
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import { request } from "undici";
import {
  BAD_BACKUP_EXIT_CODE,
  START_GATE_PATH,
  START_GATE_PORT,
  START_GATE_TOKEN_HEADER,
} from "./restore-paths.ts";
import { FETCH_CONTAINER, START_GATE_CONTAINER } from "./restore-pods.ts";

/** A seed's init container that failed this often while the old members serve ends the restore. */
export const STAGING_MAX_RESTARTS = 3;
const GATE_TIMEOUT_MS = 2_000;

function initStatus(pod: V1Pod, name: string): V1ContainerStatus | undefined {
  return pod.status?.initContainerStatuses?.find((c) => c.name === name);
}

function terminationText(status: V1ContainerStatus, exitCode: number, message?: string, reason?: string) {
  return `init container ${status.name} failed: ${message || reason || `exit ${exitCode}`}`;
}

/** The seed has downloaded the backup and proved its bytes (a later init container has begun). */
export function fetchSucceeded(pod: V1Pod): boolean {
  const statuses = pod.status?.initContainerStatuses ?? [];
  const index = statuses.findIndex((c) => c.name === FETCH_CONTAINER);
  if (index < 0) return false;
  if (statuses[index]?.state?.terminated?.exitCode === 0) return true;
  return statuses.slice(index + 1).some((c) => c.state?.running || c.state?.terminated?.exitCode === 0);
}

/** The seed's data dir is in place and its etcd waits for the operator (the gate is listening). */
export function waitingAtStartGate(pod: V1Pod): boolean {
  return initStatus(pod, START_GATE_CONTAINER)?.state?.running !== undefined;
}

/** The fetch found the backup itself bad (checksum, size or etcd's trailer): the restore must fail. */
export function badBackup(pod: V1Pod): string | undefined {
  const status = initStatus(pod, FETCH_CONTAINER);
  if (!status) return undefined;
  for (const terminated of [status.state?.terminated, status.lastState?.terminated]) {
    if (terminated?.exitCode === BAD_BACKUP_EXIT_CODE)
      return terminated.message || terminated.reason || "the backup failed its checks";
  }
  return undefined;
}

/** An init container that failed STAGING_MAX_RESTARTS times (the store unreachable from the pod, say). */
export function failingRepeatedly(pod: V1Pod): string | undefined {
  for (const status of pod.status?.initContainerStatuses ?? []) {
    const last = status.state?.terminated ?? status.lastState?.terminated;
    if (status.restartCount >= STAGING_MAX_RESTARTS && last && last.exitCode !== 0)
      return `${terminationText(status, last.exitCode, last.message, last.reason)} (${status.restartCount} times)`;
  }
  return undefined;
}

/** Why the pod is not up yet, from its init containers, for the status. */
export function seedProblem(pod: V1Pod): string | undefined {
  for (const c of pod.status?.initContainerStatuses ?? []) {
    const last = c.lastState?.terminated ?? c.state?.terminated;
    if (last && last.exitCode !== 0) return terminationText(c, last.exitCode, last.message, last.reason);
    const waiting = c.state?.waiting;
    if (waiting?.reason && waiting.reason !== "PodInitializing")
      return `init container ${c.name}: ${waiting.reason} ${waiting.message ?? ""}`.trim();
  }
  return undefined;
}

/** The scheduler's word that the seed fits on no node (beside the old members), if it said so. */
export function unschedulable(pod: V1Pod): string | undefined {
  const scheduled = pod.status?.conditions?.find((c) => c.type === "PodScheduled");
  if (scheduled?.status === "False" && scheduled.reason === "Unschedulable")
    return scheduled.message || "no node fits it";
  return undefined;
}

/**
 * Lets the seed's etcd start: the start gate answers on the pod's etcd client port. Resolves true
 * once the gate has answered that etcd starts, false when it is not listening (yet, or any more).
 * A gate that refuses the token belongs to another restore's seed: that throws.
 */
export async function openStartGate(podIP: string, token: string, port = START_GATE_PORT): Promise<boolean> {
  let statusCode: number;
  try {
    const response = await request(`http://${podIP}:${port}${START_GATE_PATH}`, {
      method: "POST",
      headers: { [START_GATE_TOKEN_HEADER]: token },
      signal: AbortSignal.timeout(GATE_TIMEOUT_MS),
    });
    await response.body.dump();
    statusCode = response.statusCode;
  } catch {
    return false;
  }
  if (statusCode === 403) throw new Error(`the start gate at ${podIP} refused this restore's token`);
  return statusCode === 200;
}

// What the kubelet knows about one container, and how that reads as a Kubernetes
// V1ContainerStatus. Kept apart from process handling so the status rules can be unit-tested.
import type { V1ContainerState, V1ContainerStatus } from "@kubernetes/client-node";

export interface Terminated {
  exitCode: number;
  signal?: number;
  reason: string;
  message?: string;
  startedAt?: Date;
  finishedAt: Date;
  containerId?: string;
}

export interface ContainerState {
  name: string;
  image: string;
  imageId: string;
  init: boolean;
  /** Current process, if one runs. */
  pid?: number;
  containerId?: string;
  startedAt?: Date;
  /** Set while no process runs: why (ContainerCreating, ErrImagePull, CrashLoopBackOff, ...). */
  waiting?: { reason: string; message?: string };
  terminated?: Terminated;
  lastTerminated?: Terminated;
  restartCount: number;
  ready: boolean;
  started: boolean;
  /** Set while the container is stopped because its definition (image) changed. */
  replacing?: boolean;
  /** Earliest time of the next start attempt (back-off). */
  notBefore: number;
  /** Current back-off step, doubling from 10 s up to 5 min as a real kubelet does. */
  backoffMs: number;
  probes: { readiness: ProbeState; liveness: ProbeState; startup: ProbeState };
}

export interface ProbeState {
  nextAt: number;
  successes: number;
  failures: number;
}

export const INITIAL_BACKOFF_MS = 10_000;
export const MAX_BACKOFF_MS = 300_000;

export function newProbeState(): ProbeState {
  return { nextAt: 0, successes: 0, failures: 0 };
}

export function newContainerState(name: string, image: string, init: boolean): ContainerState {
  return {
    name,
    image,
    imageId: "",
    init,
    waiting: { reason: init ? "PodInitializing" : "ContainerCreating" },
    restartCount: 0,
    ready: false,
    started: false,
    notBefore: 0,
    backoffMs: 0,
    probes: { readiness: newProbeState(), liveness: newProbeState(), startup: newProbeState() },
  };
}

/** The next back-off delay after a failure: 10 s, 20 s, 40 s, … capped at 5 min. */
export function nextBackoff(current: number): number {
  return current === 0 ? INITIAL_BACKOFF_MS : Math.min(current * 2, MAX_BACKOFF_MS);
}

function terminatedState(t: Terminated): V1ContainerState {
  return {
    terminated: {
      exitCode: t.exitCode,
      signal: t.signal,
      reason: t.reason,
      message: t.message,
      startedAt: t.startedAt,
      finishedAt: t.finishedAt,
      containerID: t.containerId,
    },
  };
}

export function toContainerStatus(c: ContainerState): V1ContainerStatus {
  let state: V1ContainerState;
  if (c.pid !== undefined && c.startedAt) state = { running: { startedAt: c.startedAt } };
  else if (c.waiting) state = { waiting: { reason: c.waiting.reason, message: c.waiting.message } };
  else if (c.terminated) state = terminatedState(c.terminated);
  else state = { waiting: { reason: "ContainerCreating" } };
  return {
    name: c.name,
    image: c.image,
    imageID: c.imageId,
    containerID: c.pid !== undefined ? c.containerId : (c.terminated?.containerId ?? undefined),
    ready: c.ready,
    started: c.started,
    restartCount: c.restartCount,
    state,
    lastState: c.lastTerminated ? terminatedState(c.lastTerminated) : {},
  };
}

/** Terminated reason as a container runtime reports it. */
export function exitReason(exitCode: number): string {
  return exitCode === 0 ? "Completed" : "Error";
}

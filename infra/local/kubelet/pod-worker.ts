// Runs one pod for real: a network namespace with its own IP on the node's bridge, volumes on
// disk, init containers in order, then the app containers as host processes (each in its own
// mount and UTS namespace), restarts with back-off per restartPolicy, readiness/liveness/startup
// probes, pod status written to the API, and graceful termination (SIGTERM, grace period,
// SIGKILL) before the pod object is removed. All work happens in `sync()`, which is serialized
// per pod and re-run on every change and on a short tick, so a failed step is simply retried.
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { V1Container, V1Pod, V1PodCondition, V1PodStatus, V1Probe } from "@kubernetes/client-node";
import type { Logger } from "../../../shared/log.ts";
import type { NetworkLayout } from "../layout.ts";
import {
  type ContainerState,
  exitReason,
  newContainerState,
  newProbeState,
  nextBackoff,
  type Terminated,
  toContainerStatus,
} from "./container-state.ts";
import { containerArgv, containerEnv, DEFAULT_PATH, MissingReferenceError } from "./env.ts";
import { CLUSTER_DOMAIN } from "./hosts.ts";
import { type EtcdBinaries, ImagePullError, type ResolvedImage, resolveImage } from "./images.ts";
import { nextProbeAt, runProbe } from "./probes.ts";
import {
  createPodNetwork,
  deletePodNetwork,
  execInContainer,
  signalContainer,
  spawnContainer,
} from "./sandbox.ts";
import { terminationMessage, terminationMessageMount } from "./termination-message.ts";
import {
  containerMounts,
  type PreparedVolume,
  prepareVolumes,
  removePodDir,
  type VolumeSource,
} from "./volumes.ts";

export interface PodWorkerDeps {
  nodeName: string;
  network: NetworkLayout;
  etcd: EtcdBinaries[];
  podsDir: string;
  source: VolumeSource;
  allocateIp(uid: string): string;
  releaseIp(uid: string): void;
  /** Current /etc/hosts content for this pod (needs the pod's IP). */
  hostsFor(pod: V1Pod): string;
  patchStatus(pod: V1Pod, status: V1PodStatus): Promise<void>;
  /** Removes the pod object once its processes are gone (grace 0, UID precondition). */
  deletePod(pod: V1Pod): Promise<void>;
  event(pod: V1Pod, type: "Normal" | "Warning", reason: string, message: string): void;
  /** Tells the kubelet that this pod's IP or readiness changed (hosts files need a rewrite). */
  changed(): void;
  log: Logger;
}

interface Sandbox {
  netns: string;
  veth: string;
  ip: string;
}

const VOLUME_REFRESH_MS = 10_000;

function podKey(pod: V1Pod): string {
  return `${pod.metadata?.namespace}/${pod.metadata?.name}`;
}

function condition(type: string, ok: boolean, reason?: string): V1PodCondition {
  return {
    type,
    status: ok ? "True" : "False",
    reason: ok ? undefined : reason,
    lastTransitionTime: undefined,
  };
}

/** Finds an executable as execvp would, looking inside the image's directories first. */
function findExecutable(command: string, image: ResolvedImage, env: Record<string, string>): boolean {
  const candidates = command.includes("/")
    ? [command]
    : (env.PATH ?? DEFAULT_PATH).split(":").map((dir) => `${dir}/${command}`);
  for (const candidate of candidates) {
    const mount = image.mounts.find((m) => candidate.startsWith(`${m.target}/`));
    const hostPath = mount ? join(mount.source, candidate.slice(mount.target.length + 1)) : candidate;
    try {
      accessSync(hostPath, constants.X_OK);
      return true;
    } catch {
      // Keep looking along PATH.
    }
  }
  return false;
}

export class PodWorker {
  pod: V1Pod;
  readonly uid: string;
  private readonly deps: PodWorkerDeps;
  private readonly log: Logger;
  private readonly dir: string;
  private sandbox: Sandbox | undefined;
  private volumes: PreparedVolume[] | undefined;
  private volumesAt = 0;
  private readonly containers = new Map<string, ContainerState>();
  private readonly processes = new Map<string, ChildProcess>();
  private startTime: Date | undefined;
  private lastStatus = "";
  private running: Promise<void> | undefined;
  private again = false;
  private terminating = false;
  /** Set by stop(): no sync runs any more. */
  private stopped = false;
  private terminal = false;
  private done = false;
  private lastEvent = new Map<string, number>();
  private sandboxError: string | undefined;
  /** Wakes the sync loop when the next probe is due (see scheduleNextProbe). */
  private probeTimer: NodeJS.Timeout | undefined;

  constructor(pod: V1Pod, deps: PodWorkerDeps) {
    this.pod = pod;
    this.uid = pod.metadata?.uid ?? "";
    this.deps = deps;
    this.log = deps.log.child({ pod: podKey(pod) });
    this.dir = join(deps.podsDir, `${pod.metadata?.namespace}_${pod.metadata?.name}_${this.uid}`);
    for (const c of pod.spec?.initContainers ?? [])
      this.containers.set(`init:${c.name}`, newContainerState(c.name, c.image ?? "", true));
    for (const c of pod.spec?.containers ?? [])
      this.containers.set(c.name, newContainerState(c.name, c.image ?? "", false));
  }

  get podIp(): string | undefined {
    return this.sandbox?.ip;
  }

  get finished(): boolean {
    return this.done;
  }

  update(pod: V1Pod): void {
    this.pod = pod;
    this.kick();
  }

  /** Runs sync now, or once more right after the running one finishes. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.sync()
      .catch((error: unknown) => this.log.error({ err: error }, "pod sync failed"))
      .finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  /** Rewrites the pod's hosts file (cluster DNS changed). */
  refreshHosts(): void {
    if (!this.sandbox || this.done) return;
    const content = this.deps.hostsFor(this.podWithIp());
    // Rewritten in place (same inode): containers see it through their bind mount.
    writeFileSync(join(this.dir, "etc-hosts"), content);
  }

  private podWithIp(): V1Pod {
    return { ...this.pod, status: { ...this.pod.status, podIP: this.sandbox?.ip } };
  }

  private event(type: "Normal" | "Warning", reason: string, message: string, dedupeMs = 0): void {
    const key = `${reason}:${message}`;
    const last = this.lastEvent.get(key) ?? 0;
    if (dedupeMs > 0 && Date.now() - last < dedupeMs) return;
    this.lastEvent.set(key, Date.now());
    this.deps.event(this.pod, type, reason, message);
  }

  private async sync(): Promise<void> {
    if (this.done) return;
    if (this.pod.metadata?.deletionTimestamp) {
      await this.terminateAndDelete();
      return;
    }
    // A pod that reached Succeeded or Failed never runs again; it only waits for its deletion.
    if (this.terminal) return;
    if (!this.startTime) this.startTime = new Date();
    if (!(await this.ensureSandbox()) || !(await this.ensureVolumes())) {
      await this.publishStatus();
      return;
    }
    const initialized = await this.runInitContainers();
    if (initialized) await this.runAppContainers();
    await this.runProbes();
    this.scheduleNextProbe();
    const status = this.computeStatus();
    if (status.phase === "Succeeded" || status.phase === "Failed") {
      this.terminal = true;
      await this.teardown();
      this.event("Normal", "Completed", `Pod finished with phase ${status.phase}`);
    }
    await this.publishStatus(status);
  }

  private async ensureSandbox(): Promise<boolean> {
    if (this.sandbox) return true;
    const suffix = this.uid.replace(/-/g, "").slice(0, 8);
    const netns = `${this.deps.network.netnsPrefix}${suffix}`;
    const veth = `${this.deps.network.vethPrefix}${suffix}`;
    try {
      const ip = this.deps.allocateIp(this.uid);
      mkdirSync(this.dir, { recursive: true });
      await createPodNetwork({
        netns,
        ip,
        prefixLength: this.deps.network.prefixLength,
        gateway: this.deps.network.gateway,
        bridge: this.deps.network.bridge,
        vethHost: veth,
      });
      this.sandbox = { netns, veth, ip };
      this.sandboxError = undefined;
      const ns = this.pod.metadata?.namespace ?? "default";
      writeFileSync(
        join(this.dir, "resolv.conf"),
        // No DNS server runs here: names come from /etc/hosts; a local nameserver fails fast.
        `nameserver 127.0.0.1\nsearch ${ns}.svc.${CLUSTER_DOMAIN} svc.${CLUSTER_DOMAIN} ${CLUSTER_DOMAIN}\noptions ndots:5 attempts:1 timeout:1\n`,
      );
      this.refreshHosts();
      this.deps.changed();
      return true;
    } catch (error) {
      this.deps.releaseIp(this.uid);
      const message = error instanceof Error ? error.message : String(error);
      this.sandboxError = message;
      this.event("Warning", "FailedCreatePodSandBox", `Failed to create pod sandbox: ${message}`, 30_000);
      return false;
    }
  }

  private async ensureVolumes(): Promise<boolean> {
    if (this.volumes && Date.now() - this.volumesAt < VOLUME_REFRESH_MS) return true;
    try {
      this.volumes = await prepareVolumes(this.pod, this.dir, this.deps.source, {
        podIp: this.sandbox?.ip ?? "",
        hostIp: this.deps.network.gateway,
      });
      this.volumesAt = Date.now();
      return true;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.event("Warning", "FailedMount", `MountVolume.SetUp failed: ${message}`, 30_000);
      // Already-running containers keep their last good content; only a first setup blocks.
      return this.volumes !== undefined;
    }
  }

  private spec(name: string, init: boolean): V1Container | undefined {
    const list = init ? this.pod.spec?.initContainers : this.pod.spec?.containers;
    return list?.find((c) => c.name === name);
  }

  private state(name: string, init: boolean): ContainerState {
    const key = init ? `init:${name}` : name;
    const existing = this.containers.get(key);
    if (existing) return existing;
    const created = newContainerState(name, this.spec(name, init)?.image ?? "", init);
    this.containers.set(key, created);
    return created;
  }

  /** True once every init container has completed successfully. */
  private async runInitContainers(): Promise<boolean> {
    const policy = this.pod.spec?.restartPolicy ?? "Always";
    for (const spec of this.pod.spec?.initContainers ?? []) {
      const state = this.state(spec.name, true);
      if (state.terminated?.exitCode === 0 && state.pid === undefined) continue;
      if (state.pid !== undefined) return false;
      if (state.terminated && state.terminated.exitCode !== 0 && policy === "Never") return false;
      await this.maybeStart(spec, state);
      return false;
    }
    return true;
  }

  private async runAppContainers(): Promise<void> {
    const policy = this.pod.spec?.restartPolicy ?? "Always";
    for (const spec of this.pod.spec?.containers ?? []) {
      const state = this.state(spec.name, false);
      if (state.pid !== undefined && spec.image !== state.image) {
        // The image of a running container was changed (the only container field a pod update
        // may change): like the kubelet, kill it and start it again at once with the new image,
        // whatever the restart policy (computePodActions restarts a container whose spec changed;
        // coreos made member pods with restartPolicy Never and upgraded them this way).
        this.event("Normal", "Killing", `Container ${spec.name} definition changed, will be restarted`);
        state.replacing = true;
        await this.stopProcess(state, (this.pod.spec?.terminationGracePeriodSeconds ?? 30) * 1000);
        if (!this.terminating) await this.maybeStart(spec, state);
        continue;
      }
      if (state.pid !== undefined) continue;
      if (state.terminated) {
        const failed = state.terminated.exitCode !== 0;
        if (policy === "Never" || (policy === "OnFailure" && !failed)) continue;
      }
      await this.maybeStart(spec, state);
    }
  }

  private async maybeStart(spec: V1Container, state: ContainerState): Promise<void> {
    if (Date.now() < state.notBefore) {
      if (state.terminated && !state.waiting?.reason.includes("ImagePull")) {
        state.lastTerminated = state.terminated;
        state.waiting = {
          reason: "CrashLoopBackOff",
          message: `back-off ${Math.round(state.backoffMs / 1000)}s restarting failed container=${spec.name} pod=${this.pod.metadata?.name}_${this.pod.metadata?.namespace}(${this.uid})`,
        };
      }
      return;
    }
    await this.startContainer(spec, state);
  }

  private failStart(state: ContainerState, reason: string, message: string, eventReason = "Failed"): void {
    state.backoffMs = nextBackoff(state.backoffMs);
    state.notBefore = Date.now() + state.backoffMs;
    state.waiting = { reason, message };
    this.event("Warning", eventReason, message, 30_000);
  }

  private async startContainer(spec: V1Container, state: ContainerState): Promise<void> {
    const sandbox = this.sandbox;
    const volumes = this.volumes;
    if (!sandbox || !volumes) return;
    let image: ResolvedImage;
    try {
      image = resolveImage(spec.image ?? "", this.deps.etcd);
    } catch (error) {
      if (!(error instanceof ImagePullError)) throw error;
      const firstFailure =
        state.waiting?.reason !== "ErrImagePull" && state.waiting?.reason !== "ImagePullBackOff";
      const reason = firstFailure ? "ErrImagePull" : "ImagePullBackOff";
      this.failStart(state, reason, error.message);
      if (!firstFailure) this.event("Normal", "BackOff", `Back-off pulling image "${spec.image}"`, 30_000);
      return;
    }
    // Like the kubelet: the hostname is the pod's hostname or name, cut to 63 characters.
    const hostname = (this.pod.spec?.hostname ?? this.pod.metadata?.name ?? "pod")
      .slice(0, 63)
      .replace(/[.-]+$/, "");
    let env: Record<string, string>;
    let argv: string[];
    let mounts: { source: string; target: string; readOnly: boolean }[];
    let messageMount: { source: string; target: string; readOnly: boolean };
    try {
      const skipped: string[] = [];
      env = await containerEnv(
        this.pod,
        spec,
        this.deps.source,
        {
          podIp: sandbox.ip,
          hostIp: this.deps.network.gateway,
          hostname,
        },
        skipped,
      );
      if (skipped.length > 0) {
        this.event(
          "Warning",
          "InvalidEnvironmentVariableNames",
          `Keys [${skipped.join(", ")}] from the EnvFrom were skipped since they are considered invalid environment variable names.`,
          60_000,
        );
      }
      argv = containerArgv(spec, image, env);
      messageMount = terminationMessageMount(this.dir, spec, state.restartCount);
      mounts = [
        ...image.mounts,
        messageMount,
        ...containerMounts(spec.volumeMounts, volumes),
        { source: join(this.dir, "etc-hosts"), target: "/etc/hosts", readOnly: false },
        { source: join(this.dir, "resolv.conf"), target: "/etc/resolv.conf", readOnly: true },
      ];
    } catch (error) {
      if (!(error instanceof MissingReferenceError)) throw error;
      this.failStart(state, "CreateContainerConfigError", error.message);
      return;
    }
    const executable = argv[0];
    if (!executable || !findExecutable(executable, image, env)) {
      const message = `failed to create containerd task: exec: "${executable ?? ""}": executable file not found in $PATH`;
      this.recordExit(state, {
        exitCode: 128,
        reason: "StartError",
        message,
        finishedAt: new Date(),
        startedAt: new Date(0),
      });
      this.event("Warning", "Failed", `Error: ${message}`, 30_000);
      return;
    }
    if (state.restartCount === 0 && !state.terminated) {
      this.event("Normal", "Pulled", `Container image "${spec.image}" already present on machine`);
    }
    const logDir = join(this.dir, "logs", spec.name);
    mkdirSync(logDir, { recursive: true });
    const containerId = `local://${randomBytes(16).toString("hex")}`;
    const logFile = join(logDir, `${state.restartCount}.log`);
    // Awaits above may have let a stop or a deletion in: never start a process after that.
    if (this.stopped || this.terminating || this.pod.metadata?.deletionTimestamp) return;
    let child: ChildProcess;
    try {
      child = spawnContainer({
        netns: sandbox.netns,
        hostname,
        mounts,
        workingDir: spec.workingDir,
        env,
        command: argv,
        logFile,
      });
    } catch (error) {
      // The sandbox refuses what it cannot pass through safely (e.g. env names that are not identifiers).
      this.failStart(
        state,
        "CreateContainerConfigError",
        error instanceof Error ? error.message : String(error),
      );
      return;
    }
    child.on("error", (error) =>
      this.log.warn({ err: error, container: spec.name }, "container process error"),
    );
    const pid = child.pid;
    if (pid === undefined) {
      this.failStart(state, "RunContainerError", `could not start process for container ${spec.name}`);
      return;
    }
    if (state.terminated) state.lastTerminated = state.terminated;
    state.terminated = undefined;
    state.waiting = undefined;
    state.pid = pid;
    state.containerId = containerId;
    state.imageId = image.imageId;
    state.image = spec.image ?? "";
    state.startedAt = new Date();
    state.ready = false;
    state.started = !spec.startupProbe;
    state.probes = { readiness: newProbeState(), liveness: newProbeState(), startup: newProbeState() };
    this.processes.set(state.init ? `init:${spec.name}` : spec.name, child);
    this.event("Normal", "Created", `Created container: ${spec.name}`);
    this.event("Normal", "Started", `Started container ${spec.name}`);
    this.log.info({ container: spec.name, pid, argv }, "container started");
    child.on("exit", (code, signal) => {
      const exitCode = code ?? 128 + (signal ? signalNumber(signal) : 0);
      const startedAt = state.startedAt;
      const finishedAt = new Date();
      this.processes.delete(state.init ? `init:${spec.name}` : spec.name);
      state.pid = undefined;
      state.ready = false;
      this.recordExit(state, {
        exitCode,
        signal: signal ? signalNumber(signal) : undefined,
        reason: exitReason(exitCode),
        message: terminationMessage(spec, messageMount.source, logFile, exitCode),
        startedAt,
        finishedAt,
        containerId,
      });
      this.log.info({ container: spec.name, exitCode, signal }, "container exited");
      this.deps.changed();
      this.kick();
    });
  }

  private recordExit(state: ContainerState, terminated: Terminated): void {
    const ranLong =
      terminated.startedAt && terminated.finishedAt.getTime() - terminated.startedAt.getTime() > 600_000;
    state.terminated = terminated;
    state.waiting = undefined;
    const policy = this.pod.spec?.restartPolicy ?? "Always";
    const willRestart =
      policy === "Always" ||
      (policy === "OnFailure" && terminated.exitCode !== 0) ||
      (state.init && policy !== "Never");
    if (state.replacing) {
      // A restart for a changed definition is no failure: no back-off.
      state.replacing = false;
      state.restartCount += 1;
      state.notBefore = 0;
    } else if (willRestart && !this.terminating) {
      state.restartCount += state.init && terminated.exitCode === 0 ? 0 : 1;
      // A container that ran for 10 minutes starts its back-off afresh.
      state.backoffMs = ranLong ? 0 : nextBackoff(state.backoffMs);
      state.notBefore = terminated.exitCode === 0 && state.init ? 0 : Date.now() + state.backoffMs;
      if (terminated.exitCode !== 0) {
        this.event(
          "Warning",
          "BackOff",
          `Back-off restarting failed container ${state.name} in pod ${this.pod.metadata?.name}`,
          30_000,
        );
      }
    }
  }

  private probeDue(
    probe: V1Probe | undefined,
    state: ContainerState,
    which: "readiness" | "liveness" | "startup",
  ): boolean {
    if (!probe || state.pid === undefined || !state.startedAt) return false;
    const p = state.probes[which];
    const now = Date.now();
    if (p.nextAt === 0) p.nextAt = state.startedAt.getTime() + (probe.initialDelaySeconds ?? 0) * 1000;
    return now >= p.nextAt;
  }

  private async runProbe(
    spec: V1Container,
    state: ContainerState,
    which: "readiness" | "liveness" | "startup",
  ): Promise<boolean | undefined> {
    const probe =
      which === "readiness"
        ? spec.readinessProbe
        : which === "liveness"
          ? spec.livenessProbe
          : spec.startupProbe;
    if (!probe || !this.probeDue(probe, state, which)) return undefined;
    const pid = state.pid;
    const ip = this.sandbox?.ip;
    if (pid === undefined || !ip) return undefined;
    const p = state.probes[which];
    p.nextAt = nextProbeAt(p.nextAt, Date.now(), (probe.periodSeconds ?? 10) * 1000);
    const result = await runProbe(probe, spec, ip, (command, timeoutMs) =>
      execInContainer(pid, command, timeoutMs),
    );
    if (result.ok) {
      p.successes++;
      p.failures = 0;
      return p.successes >= (which === "readiness" ? (probe.successThreshold ?? 1) : 1) ? true : undefined;
    }
    p.failures++;
    p.successes = 0;
    const label = which[0]?.toUpperCase() + which.slice(1);
    this.event("Warning", "Unhealthy", `${label} probe failed: ${result.message}`, 10_000);
    return p.failures >= (probe.failureThreshold ?? 3) ? false : undefined;
  }

  /**
   * The kubelet probes each container on its own ticker, every periodSeconds. Without this the
   * probes ran only on the node's 500 ms sync tick, up to half a second after they were due: a
   * member serving a moment after one probe waited up to 1.5 s to be Ready, not 1 s.
   */
  private scheduleNextProbe(): void {
    clearTimeout(this.probeTimer);
    this.probeTimer = undefined;
    if (this.stopped || this.terminating) return;
    let next = Number.POSITIVE_INFINITY;
    for (const spec of this.pod.spec?.containers ?? []) {
      const state = this.state(spec.name, false);
      if (state.pid === undefined) continue;
      for (const p of Object.values(state.probes)) if (p.nextAt > 0) next = Math.min(next, p.nextAt);
    }
    if (!Number.isFinite(next)) return;
    this.probeTimer = setTimeout(() => this.kick(), Math.max(0, next - Date.now()));
    this.probeTimer.unref();
  }

  private async runProbes(): Promise<void> {
    for (const spec of this.pod.spec?.containers ?? []) {
      const state = this.state(spec.name, false);
      if (state.pid === undefined) continue;
      if (!state.started) {
        const startup = await this.runProbe(spec, state, "startup");
        if (startup === true) state.started = true;
        else if (startup === false) await this.killForProbe(spec, state, "startup");
        continue;
      }
      const liveness = await this.runProbe(spec, state, "liveness");
      if (liveness === false) {
        await this.killForProbe(spec, state, "liveness");
        continue;
      }
      if (!spec.readinessProbe) {
        if (!state.ready) {
          state.ready = true;
          this.deps.changed();
        }
        continue;
      }
      const readiness = await this.runProbe(spec, state, "readiness");
      if (readiness !== undefined && readiness !== state.ready) {
        state.ready = readiness;
        this.deps.changed();
      }
    }
  }

  private async killForProbe(spec: V1Container, state: ContainerState, which: string): Promise<void> {
    const pid = state.pid;
    if (pid === undefined) return;
    this.event("Normal", "Killing", `Container ${spec.name} failed ${which} probe, will be restarted`);
    const grace = (this.pod.spec?.terminationGracePeriodSeconds ?? 30) * 1000;
    await this.stopProcess(state, grace);
  }

  /** SIGTERM, wait up to graceMs, SIGKILL; resolves once the process has exited. */
  private async stopProcess(state: ContainerState, graceMs: number): Promise<void> {
    const child = this.processes.get(state.init ? `init:${state.name}` : state.name);
    const pid = state.pid;
    if (!child || pid === undefined) return;
    const exited = new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once("exit", () => resolve());
    });
    signalContainer(pid, "SIGTERM");
    const timer = setTimeout(() => signalContainer(pid, "SIGKILL"), Math.max(0, graceMs));
    await exited;
    clearTimeout(timer);
    // Anything the container forked stays in its process group: make sure it is gone too.
    signalContainer(pid, "SIGKILL");
  }

  /**
   * Stops the pod from outside its sync loop (kubelet shutdown, pod force-deleted): no new sync
   * starts, the one in flight finishes first (so it cannot start a container after we looked),
   * then every process is stopped and the network released. The pod object stays.
   */
  async stop(graceMs = 0): Promise<void> {
    this.stopped = true;
    clearTimeout(this.probeTimer);
    while (this.running) await this.running;
    await this.teardown(graceMs);
  }

  /** Stops every process and releases the network; only called from sync or after stop(). */
  private async teardown(graceMs = 0): Promise<void> {
    this.terminating = true;
    await Promise.all([...this.containers.values()].map((state) => this.stopProcess(state, graceMs)));
    if (this.sandbox) {
      await deletePodNetwork(this.sandbox.netns, this.sandbox.veth);
      this.deps.releaseIp(this.uid);
      this.sandbox = undefined;
      this.deps.changed();
    }
  }

  private async terminateAndDelete(): Promise<void> {
    const grace =
      this.pod.metadata?.deletionGracePeriodSeconds ?? this.pod.spec?.terminationGracePeriodSeconds ?? 30;
    if (!this.terminating) {
      for (const state of this.containers.values()) {
        if (state.pid !== undefined) this.event("Normal", "Killing", `Stopping container ${state.name}`);
      }
    }
    await this.teardown(grace * 1000);
    removePodDir(this.dir);
    await this.deps.deletePod(this.pod);
    this.done = true;
  }

  /** The pod object is gone from the API (force-deleted): stop quickly, remove local state. */
  async forget(): Promise<void> {
    const grace = Math.min(this.pod.spec?.terminationGracePeriodSeconds ?? 30, 2);
    await this.stop(grace * 1000);
    removePodDir(this.dir);
    this.done = true;
  }

  private computeStatus(): V1PodStatus {
    const spec = this.pod.spec;
    const policy = spec?.restartPolicy ?? "Always";
    const init = (spec?.initContainers ?? []).map((c) => this.state(c.name, true));
    const app = (spec?.containers ?? []).map((c) => this.state(c.name, false));
    const initialized = init.every((s) => s.terminated?.exitCode === 0 && s.pid === undefined);
    const initFailed = init.some((s) => s.terminated && s.terminated.exitCode !== 0) && policy === "Never";
    const running = app.some((s) => s.pid !== undefined);
    const allTerminated = app.length > 0 && app.every((s) => s.pid === undefined && s.terminated);
    const anyFailed = app.some((s) => s.terminated && s.terminated.exitCode !== 0);
    let phase = "Pending";
    if (initFailed) phase = "Failed";
    else if (allTerminated && policy === "Never") phase = anyFailed ? "Failed" : "Succeeded";
    else if (allTerminated && policy === "OnFailure" && !anyFailed) phase = "Succeeded";
    else if (
      initialized &&
      (running || app.some((s) => s.terminated || s.waiting?.reason === "CrashLoopBackOff"))
    )
      phase = "Running";
    if (this.done || (phase !== "Succeeded" && phase !== "Failed" && this.terminating && !running)) {
      phase = this.pod.status?.phase ?? phase;
    }
    const containersReady = app.length > 0 && app.every((s) => s.ready);
    const ip =
      this.sandbox?.ip ?? (phase === "Succeeded" || phase === "Failed" ? this.pod.status?.podIP : undefined);
    const hostIp = this.deps.network.gateway;
    const conditions: V1PodCondition[] = [
      condition("PodReadyToStartContainers", this.sandbox !== undefined),
      condition("Initialized", initialized, "ContainersNotInitialized"),
      condition("Ready", containersReady, "ContainersNotReady"),
      condition("ContainersReady", containersReady, "ContainersNotReady"),
      condition("PodScheduled", true),
    ];
    return {
      phase,
      conditions,
      hostIP: hostIp,
      hostIPs: [{ ip: hostIp }],
      podIP: ip,
      podIPs: ip ? [{ ip }] : undefined,
      startTime: this.startTime,
      initContainerStatuses: init.length > 0 ? init.map(toContainerStatus) : undefined,
      containerStatuses: app.map(toContainerStatus),
      message: this.sandboxError,
      // The API server computes the QoS class when the pod is created and refuses any other value.
      qosClass: this.pod.status?.qosClass ?? "BestEffort",
    };
  }

  private async publishStatus(status: V1PodStatus = this.computeStatus()): Promise<void> {
    // Keep transition times stable: only a condition whose status flips gets a new time.
    const previous = this.pod.status?.conditions ?? [];
    const now = new Date();
    for (const c of status.conditions ?? []) {
      const before = previous.find((p) => p.type === c.type);
      c.lastTransitionTime =
        before && before.status === c.status && before.lastTransitionTime ? before.lastTransitionTime : now;
    }
    const fingerprint = JSON.stringify({
      ...status,
      conditions: status.conditions?.map((c) => [c.type, c.status]),
    });
    if (fingerprint === this.lastStatus) return;
    await this.deps.patchStatus(this.pod, status);
    this.lastStatus = fingerprint;
  }
}

function signalNumber(signal: NodeJS.Signals): number {
  const numbers: Partial<Record<NodeJS.Signals, number>> = {
    SIGHUP: 1,
    SIGINT: 2,
    SIGQUIT: 3,
    SIGKILL: 9,
    SIGTERM: 15,
    SIGABRT: 6,
    SIGSEGV: 11,
  };
  return numbers[signal] ?? 0;
}

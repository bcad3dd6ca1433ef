// The process kubelet: one Node, pods run as real processes. It binds pending pods to itself
// (there is no scheduler), runs one PodWorker per pod bound here, keeps every pod's /etc/hosts in
// step with pods and Services (cluster DNS), provisions hostPath volumes for pending claims, and
// heartbeats the Node's Lease and status.
import { join } from "node:path";
import {
  CoreV1Api,
  type Informer,
  type KubeConfig,
  type KubernetesObject,
  type ObjectCache,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1Service,
} from "@kubernetes/client-node";
import { resilientInformer } from "../../../shared/informer.ts";
import type { Logger } from "../../../shared/log.ts";
import type { NetworkLayout } from "../layout.ts";
import { KubeletApi } from "./api.ts";
import { clusterRecords, hostsFileFor } from "./hosts.ts";
import type { EtcdBinaries } from "./images.ts";
import { nodeConditions, nodeObject } from "./node.ts";
import { PodWorker } from "./pod-worker.ts";
import { deletePodNetwork, listNetns } from "./sandbox.ts";

export interface KubeletConfig {
  nodeName: string;
  stateDir: string;
  network: NetworkLayout;
  etcd: EtcdBinaries[];
  kubernetesVersion: string;
}

const LEASE_SECONDS = 40;
const HEARTBEAT_MS = 10_000;
const TICK_MS = 500;

type Cache<T extends KubernetesObject> = Informer<T> & ObjectCache<T>;

/** Hands out pod IPs .2-.254 of the node's /24 and remembers which pod holds which. */
class IpAllocator {
  private readonly byUid = new Map<string, string>();
  private readonly base: string;
  private next = 2;

  constructor(base: string) {
    this.base = base;
  }

  allocate(uid: string): string {
    const held = this.byUid.get(uid);
    if (held) return held;
    const used = new Set(this.byUid.values());
    // Round-robin from the last one handed out, so a freed IP is not reused at once (clients
    // and caches may still point at the old pod).
    for (let i = 0; i < 253; i++) {
      const host = 2 + ((this.next - 2 + i) % 253);
      const ip = `${this.base}.${host}`;
      if (!used.has(ip)) {
        this.byUid.set(uid, ip);
        this.next = host + 1 > 254 ? 2 : host + 1;
        return ip;
      }
    }
    throw new Error(`no free pod IP left in ${this.base}.0/24`);
  }

  release(uid: string): void {
    this.byUid.delete(uid);
  }
}

export class Kubelet {
  private readonly config: KubeletConfig;
  private readonly api: KubeletApi;
  private readonly log: Logger;
  private readonly kc: KubeConfig;
  private readonly workers = new Map<string, PodWorker>();
  private readonly binding = new Set<string>();
  private readonly provisioning = new Set<string>();
  private readonly ips: IpAllocator;
  private pods: Cache<V1Pod> | undefined;
  private services: Cache<V1Service> | undefined;
  private claims: Cache<V1PersistentVolumeClaim> | undefined;
  private timers: NodeJS.Timeout[] = [];
  private hostsTimer: NodeJS.Timeout | undefined;
  private stopping = false;

  constructor(kc: KubeConfig, config: KubeletConfig, log: Logger) {
    this.kc = kc;
    this.config = config;
    this.log = log;
    this.api = new KubeletApi(kc, config.nodeName, join(config.stateDir, "pv"));
    this.ips = new IpAllocator(config.network.base);
  }

  async start(): Promise<void> {
    // Pods of an earlier kubelet process of this node are gone with it: start from a clean slate.
    for (const netns of await listNetns(this.config.network.netnsPrefix)) {
      const suffix = netns.slice(this.config.network.netnsPrefix.length);
      await deletePodNetwork(netns, `${this.config.network.vethPrefix}${suffix}`);
    }
    const { network, nodeName, kubernetesVersion } = this.config;
    await this.api.registerNode(nodeObject(nodeName, network.gateway, kubernetesVersion, network.cidr));
    await this.api.renewLease(LEASE_SECONDS);
    this.log.info({ node: nodeName }, "node registered");

    const core = this.kc.makeApiClient(CoreV1Api);
    // Informers that restart themselves: the kubelet must outlive apiserver restarts.
    this.pods = resilientInformer(this.kc, "/api/v1/pods", () => core.listPodForAllNamespaces(), this.log);
    this.services = resilientInformer(
      this.kc,
      "/api/v1/services",
      () => core.listServiceForAllNamespaces(),
      this.log,
    );
    this.claims = resilientInformer(
      this.kc,
      "/api/v1/persistentvolumeclaims",
      () => core.listPersistentVolumeClaimForAllNamespaces(),
      this.log,
    );
    this.pods.on("add", (pod) => this.onPod(pod));
    this.pods.on("update", (pod) => this.onPod(pod));
    this.pods.on("delete", (pod) => this.onPodDeleted(pod));
    this.services.on("change", () => this.scheduleHostsRefresh());
    this.claims.on("add", (claim) => this.onClaim(claim));
    this.claims.on("update", (claim) => this.onClaim(claim));
    this.claims.on("delete", (claim) =>
      this.api
        .releaseVolume(claim)
        .catch((error: unknown) =>
          this.log.warn({ err: error, claim: claim.metadata?.name }, "volume release failed"),
        ),
    );
    await Promise.all([this.pods.start(), this.services.start(), this.claims.start()]);

    this.timers.push(setInterval(() => this.tick(), TICK_MS));
    this.timers.push(setInterval(() => void this.heartbeat(), HEARTBEAT_MS));
  }

  private tick(): void {
    for (const [uid, worker] of this.workers) {
      if (worker.finished) this.workers.delete(uid);
      else worker.kick();
    }
  }

  private async heartbeat(): Promise<void> {
    try {
      await this.api.renewLease(LEASE_SECONDS);
      await this.api.patchNodeStatus({ conditions: nodeConditions(new Date(), !this.stopping) });
    } catch (error) {
      this.log.warn({ err: error }, "node heartbeat failed");
    }
  }

  private onPod(pod: V1Pod): void {
    if (this.stopping) return;
    const uid = pod.metadata?.uid ?? "";
    const nodeName = pod.spec?.nodeName;
    if (!nodeName) {
      this.maybeBind(pod);
      return;
    }
    if (nodeName !== this.config.nodeName) return;
    const worker = this.workers.get(uid);
    if (worker) {
      worker.update(pod);
    } else if (pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed") {
      // Finished before this kubelet started: nothing runs; only a deletion needs finishing.
      if (pod.metadata?.deletionTimestamp)
        void this.api.deletePod(pod).catch((error: unknown) => this.warn(pod, error));
    } else {
      const created = new PodWorker(pod, this.workerDeps());
      this.workers.set(uid, created);
      created.kick();
    }
    this.scheduleHostsRefresh();
  }

  private maybeBind(pod: V1Pod): void {
    const uid = pod.metadata?.uid ?? "";
    const scheduler = pod.spec?.schedulerName ?? "default-scheduler";
    if (scheduler !== "default-scheduler" || pod.metadata?.deletionTimestamp || this.binding.has(uid)) return;
    this.binding.add(uid);
    this.api
      .bind(pod)
      .then(() =>
        this.event(
          pod,
          "Normal",
          "Scheduled",
          `Successfully assigned ${pod.metadata?.namespace}/${pod.metadata?.name} to ${this.config.nodeName}`,
        ),
      )
      .catch((error: unknown) => this.warn(pod, error))
      .finally(() => this.binding.delete(uid));
  }

  private onPodDeleted(pod: V1Pod): void {
    const uid = pod.metadata?.uid ?? "";
    const worker = this.workers.get(uid);
    if (worker) {
      this.workers.delete(uid);
      void worker.forget().catch((error: unknown) => this.warn(pod, error));
    }
    this.scheduleHostsRefresh();
  }

  private onClaim(claim: V1PersistentVolumeClaim): void {
    const uid = claim.metadata?.uid ?? "";
    if (claim.status?.phase !== "Pending" || claim.spec?.volumeName || this.provisioning.has(uid)) return;
    this.provisioning.add(uid);
    this.api
      .provisionVolume(claim)
      .catch((error: unknown) =>
        this.log.warn({ err: error, claim: claim.metadata?.name }, "volume provisioning failed"),
      )
      .finally(() => this.provisioning.delete(uid));
  }

  private workerDeps() {
    return {
      nodeName: this.config.nodeName,
      network: this.config.network,
      etcd: this.config.etcd,
      podsDir: join(this.config.stateDir, "pods"),
      source: this.api,
      allocateIp: (uid: string) => this.ips.allocate(uid),
      releaseIp: (uid: string) => this.ips.release(uid),
      hostsFor: (pod: V1Pod) => hostsFileFor(pod, this.records()),
      patchStatus: (pod: V1Pod, status: NonNullable<V1Pod["status"]>) => this.api.patchPodStatus(pod, status),
      deletePod: (pod: V1Pod) => this.api.deletePod(pod),
      event: (pod: V1Pod, type: "Normal" | "Warning", reason: string, message: string) =>
        this.event(pod, type, reason, message),
      changed: () => this.scheduleHostsRefresh(),
      log: this.log,
    };
  }

  private records(): ReturnType<typeof clusterRecords> {
    return clusterRecords([...(this.pods?.list() ?? [])], [...(this.services?.list() ?? [])]);
  }

  /** Coalesces bursts of pod/Service changes into one rewrite of every hosts file. */
  private scheduleHostsRefresh(): void {
    if (this.hostsTimer) return;
    this.hostsTimer = setTimeout(() => {
      this.hostsTimer = undefined;
      for (const worker of this.workers.values()) {
        try {
          worker.refreshHosts();
        } catch (error) {
          this.log.warn({ err: error, pod: worker.pod.metadata?.name }, "hosts file update failed");
        }
      }
    }, 50);
  }

  private event(pod: V1Pod, type: "Normal" | "Warning", reason: string, message: string): void {
    this.api
      .event(pod, type, reason, message)
      .catch((error: unknown) => this.log.debug({ err: error }, "event not recorded"));
  }

  private warn(pod: V1Pod, error: unknown): void {
    this.log.warn(
      { err: error, pod: `${pod.metadata?.namespace}/${pod.metadata?.name}` },
      "pod operation failed",
    );
  }

  /** Stops every pod's processes (within `graceMs`) and removes their namespaces; pod objects stay. */
  async stop(graceMs = 5_000): Promise<void> {
    this.stopping = true;
    for (const timer of this.timers) clearInterval(timer);
    await Promise.all([this.pods?.stop(), this.services?.stop(), this.claims?.stop()]);
    await this.heartbeat();
    await Promise.all([...this.workers.values()].map((worker) => worker.stop(graceMs)));
    this.workers.clear();
  }
}

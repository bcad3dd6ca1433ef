// The kubelet's calls to kube-apiserver, in one place: reads of Secrets/ConfigMaps/PVCs for
// volumes and env, TokenRequests for projected service-account tokens, pod binding, pod status,
// final pod deletion, Events, and the Node object with its Lease heartbeat.
import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import {
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1Node,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1PodStatus,
  type V1ServiceAccountTokenProjection,
} from "@kubernetes/client-node";
import { httpStatusOf, ignoreGoneOrConflict, orUndefinedOn404 } from "../../../shared/kube-errors.ts";
import type { VolumeSource } from "./volumes.ts";

export { httpStatusOf as httpStatus };

const MERGE_PATCH = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
/** Marks the PVs this kubelet provisions (and so may delete). */
const PROVISIONER = "etcd-operator.local/hostpath";

export class KubeletApi implements VolumeSource {
  readonly core: CoreV1Api;
  private readonly coordination: CoordinationV1Api;
  private readonly nodeName: string;
  private readonly pvRoot: string;

  constructor(kc: KubeConfig, nodeName: string, pvRoot: string) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.coordination = kc.makeApiClient(CoordinationV1Api);
    this.nodeName = nodeName;
    this.pvRoot = pvRoot;
  }

  async secretData(namespace: string, name: string): Promise<Record<string, Buffer> | undefined> {
    const secret = await orUndefinedOn404(this.core.readNamespacedSecret({ name, namespace }));
    if (!secret) return undefined;
    const data: Record<string, Buffer> = {};
    for (const [k, v] of Object.entries(secret.data ?? {})) data[k] = Buffer.from(v, "base64");
    for (const [k, v] of Object.entries(secret.stringData ?? {})) data[k] = Buffer.from(v);
    return data;
  }

  async configMapData(namespace: string, name: string): Promise<Record<string, string> | undefined> {
    const cm = await orUndefinedOn404(this.core.readNamespacedConfigMap({ name, namespace }));
    if (!cm) return undefined;
    const data: Record<string, string> = { ...(cm.data ?? {}) };
    for (const [k, v] of Object.entries(cm.binaryData ?? {}))
      data[k] = Buffer.from(v, "base64").toString("utf8");
    return data;
  }

  async claimPath(namespace: string, claim: string): Promise<string | undefined> {
    const pvc = await orUndefinedOn404(
      this.core.readNamespacedPersistentVolumeClaim({ name: claim, namespace }),
    );
    const volumeName = pvc?.spec?.volumeName;
    if (pvc?.status?.phase !== "Bound" || !volumeName) return undefined;
    const pv = await orUndefinedOn404(this.core.readPersistentVolume({ name: volumeName }));
    return pv?.spec?.hostPath?.path ?? pv?.spec?.local?.path;
  }

  async serviceAccountToken(pod: V1Pod, projection: V1ServiceAccountTokenProjection): Promise<string> {
    const namespace = pod.metadata?.namespace ?? "default";
    const request = await this.core.createNamespacedServiceAccountToken({
      name: pod.spec?.serviceAccountName ?? "default",
      namespace,
      body: {
        spec: {
          audiences: projection.audience ? [projection.audience] : [],
          expirationSeconds: projection.expirationSeconds ?? 3607,
          boundObjectRef: { kind: "Pod", apiVersion: "v1", name: pod.metadata?.name, uid: pod.metadata?.uid },
        },
      },
    });
    return request.status?.token ?? "";
  }

  async bind(pod: V1Pod): Promise<void> {
    const namespace = pod.metadata?.namespace ?? "default";
    const name = pod.metadata?.name ?? "";
    await this.core.createNamespacedBinding({
      namespace,
      body: {
        metadata: { name, uid: pod.metadata?.uid },
        target: { apiVersion: "v1", kind: "Node", name: this.nodeName },
      },
    });
  }

  async patchPodStatus(pod: V1Pod, status: V1PodStatus): Promise<void> {
    await ignoreGoneOrConflict(
      this.core.patchNamespacedPodStatus(
        {
          name: pod.metadata?.name ?? "",
          namespace: pod.metadata?.namespace ?? "default",
          // The UID precondition keeps a stale worker from writing onto a new pod of the same name.
          body: { metadata: { uid: pod.metadata?.uid }, status },
        },
        MERGE_PATCH,
      ),
    );
  }

  async deletePod(pod: V1Pod): Promise<void> {
    await ignoreGoneOrConflict(
      this.core.deleteNamespacedPod({
        name: pod.metadata?.name ?? "",
        namespace: pod.metadata?.namespace ?? "default",
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid: pod.metadata?.uid } },
      }),
    );
  }

  async event(pod: V1Pod, type: "Normal" | "Warning", reason: string, message: string): Promise<void> {
    const namespace = pod.metadata?.namespace ?? "default";
    const now = new Date();
    await this.core.createNamespacedEvent({
      namespace,
      body: {
        metadata: { name: `${pod.metadata?.name}.${randomBytes(8).toString("hex")}`, namespace },
        involvedObject: {
          kind: "Pod",
          apiVersion: "v1",
          name: pod.metadata?.name,
          namespace,
          uid: pod.metadata?.uid,
          resourceVersion: pod.metadata?.resourceVersion,
        },
        reason,
        message,
        type,
        count: 1,
        firstTimestamp: now,
        lastTimestamp: now,
        source: { component: "kubelet", host: this.nodeName },
        reportingComponent: "kubelet",
        reportingInstance: this.nodeName,
      },
    });
  }

  /**
   * A deleted claim's volume goes with it (reclaim policy Delete), as a dynamic provisioner does it:
   * kube-controller-manager has no deleter for hostPath volumes, so the provisioner removes the PV and
   * its folder itself.
   */
  async releaseVolume(pvc: V1PersistentVolumeClaim): Promise<void> {
    const name = `pvc-${pvc.metadata?.uid}`;
    const pv = await orUndefinedOn404(this.core.readPersistentVolume({ name }));
    if (pv?.metadata?.annotations?.["pv.kubernetes.io/provisioned-by"] !== PROVISIONER) return;
    await orUndefinedOn404(this.core.deletePersistentVolume({ name }));
    await rm(join(this.pvRoot, name), { recursive: true, force: true });
  }

  /** Creates a hostPath PV pre-bound to a pending claim; kube-controller-manager completes the bind. */
  async provisionVolume(pvc: V1PersistentVolumeClaim): Promise<void> {
    const namespace = pvc.metadata?.namespace ?? "default";
    const name = `pvc-${pvc.metadata?.uid}`;
    try {
      await this.core.createPersistentVolume({
        body: {
          metadata: {
            name,
            annotations: { "pv.kubernetes.io/provisioned-by": PROVISIONER },
          },
          spec: {
            capacity: { storage: pvc.spec?.resources?.requests?.storage ?? "1Gi" },
            accessModes: pvc.spec?.accessModes ?? ["ReadWriteOnce"],
            persistentVolumeReclaimPolicy: "Delete",
            storageClassName: pvc.spec?.storageClassName ?? "",
            volumeMode: pvc.spec?.volumeMode ?? "Filesystem",
            hostPath: { path: join(this.pvRoot, name), type: "DirectoryOrCreate" },
            claimRef: {
              apiVersion: "v1",
              kind: "PersistentVolumeClaim",
              namespace,
              name: pvc.metadata?.name,
              uid: pvc.metadata?.uid,
            },
          },
        },
      });
    } catch (error) {
      if (httpStatusOf(error) !== 409) throw error;
    }
  }

  async registerNode(node: V1Node): Promise<void> {
    try {
      await this.core.createNode({ body: node });
    } catch (error) {
      if (httpStatusOf(error) !== 409) throw error;
    }
    await this.core.patchNodeStatus({ name: this.nodeName, body: { status: node.status } }, MERGE_PATCH);
  }

  async patchNodeStatus(status: V1Node["status"]): Promise<void> {
    await this.core.patchNodeStatus({ name: this.nodeName, body: { status } }, MERGE_PATCH);
  }

  /** Renews the node's Lease: the node lifecycle controller marks the node NotReady without it. */
  async renewLease(durationSeconds: number): Promise<void> {
    const namespace = "kube-node-lease";
    // Lease times are MicroTime: RFC 3339 with exactly six fractional digits (a Date would send three).
    const renewTime = new Date().toISOString().replace(/Z$/, "000Z");
    const spec = { holderIdentity: this.nodeName, leaseDurationSeconds: durationSeconds, renewTime };
    try {
      await this.coordination.patchNamespacedLease(
        { name: this.nodeName, namespace, body: { spec } },
        MERGE_PATCH,
      );
    } catch (error) {
      if (httpStatusOf(error) !== 404) throw error;
      await this.coordination.createNamespacedLease({
        namespace,
        body: {
          metadata: { name: this.nodeName },
          spec: { holderIdentity: this.nodeName, leaseDurationSeconds: durationSeconds },
        },
      });
      await this.coordination.patchNamespacedLease(
        { name: this.nodeName, namespace, body: { spec } },
        MERGE_PATCH,
      );
    }
  }
}

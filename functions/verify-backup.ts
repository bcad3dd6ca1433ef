// Verifying a backup by restoring it: a throwaway pod (owned by the EtcdBackup, so it never
// outlives it) runs the restore seeds' init containers (fetch the object and prove its bytes,
// `etcdutl snapshot restore`, install the data dir) in front of a single etcd with no peers. Once
// it serves, the restored store's revision and its key count at the backup's revision are compared
// with what the backup recorded when it was taken. The pod is deleted whatever the outcome.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { V1Pod } from "@kubernetes/client-node";
import { BACKUP_KIND, type EtcdBackup, type EtcdBackupStatus } from "../shared/api/etcd-backup.ts";
import { DEFAULT_REPOSITORY } from "../shared/api/etcd-cluster.ts";
import { countKeys } from "../shared/etcd-maintenance.ts";
import { type EtcdClientOptions, endpointStatuses } from "../shared/etcd-members.ts";
import { type Kube, ownerReference } from "../shared/kube.ts";
import type { Logger } from "../shared/log.ts";
import { CLIENT_PORT, DATA_DIR, PEER_PORT } from "../shared/member-pods.ts";
import { bucketPath, sectionOf } from "../shared/object-store/storages.ts";
import { restoreSeedPod } from "../shared/restore-pods.ts";
import { badBackup, seedProblem } from "../shared/restore-seeds.ts";

export const DEFAULT_VERIFY_TIMEOUT_SECONDS = 600;
/** The label that finds a backup's verification pods. */
export const VERIFY_LABEL = "etcd_backup_verification";
const MEMBER_NAME = "verify";
const PEER_URL = `http://localhost:${PEER_PORT}`;

export interface VerifyDeps {
  kube: Kube;
  log: Logger;
  /** Options for the etcd client; TLS is left out: the throwaway etcd serves plain HTTP on its pod IP. */
  etcd: EtcdClientOptions;
  operatorImage: string;
}

export interface VerifiedBackup {
  path: string;
  revision: number;
  keyCount?: number;
  etcdVersion: string;
  sha256: string;
  crc32?: string;
  size: number;
  cluster?: string;
}

export type Verification = NonNullable<EtcdBackupStatus["verification"]>;

function podName(backup: string): string {
  return `${backup.slice(0, 40).replace(/[-.]+$/, "")}-verify-${randomBytes(3).toString("hex")}`;
}

function verificationPod(
  backup: EtcdBackup,
  taken: VerifiedBackup,
  repository: string,
  deps: VerifyDeps,
): V1Pod {
  const namespace = backup.metadata?.namespace ?? "default";
  const name = podName(backup.metadata?.name ?? "backup");
  const image = `${repository}:v${taken.etcdVersion}`;
  const base: V1Pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace,
      labels: { [VERIFY_LABEL]: (backup.metadata?.name ?? "").slice(0, 63).replace(/[-.]+$/, "") },
      ownerReferences: [ownerReference({ ...backup, kind: BACKUP_KIND })],
    },
    spec: {
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      containers: [
        {
          name: "etcd",
          image,
          command: [
            "/usr/local/bin/etcd",
            `--name=${MEMBER_NAME}`,
            `--data-dir=${DATA_DIR}`,
            `--listen-client-urls=http://0.0.0.0:${CLIENT_PORT}`,
            `--advertise-client-urls=http://localhost:${CLIENT_PORT}`,
            `--listen-peer-urls=http://0.0.0.0:${PEER_PORT}`,
            `--initial-advertise-peer-urls=${PEER_URL}`,
          ],
          ports: [{ name: "client", containerPort: CLIENT_PORT }],
          volumeMounts: [{ name: "etcd-data", mountPath: "/var/etcd" }],
        },
      ],
      volumes: [{ name: "etcd-data", emptyDir: {} }],
    },
  };
  const type = backup.spec.storageType;
  return restoreSeedPod({
    pod: base,
    source: {
      storageType: type,
      section: { ...sectionOf(type, backup.spec), path: bucketPath(taken.path) },
      sha256: taken.sha256,
      crc32: taken.crc32,
      size: taken.size,
    },
    operatorImage: deps.operatorImage,
    etcdImage: image,
    memberName: MEMBER_NAME,
    peerURL: PEER_URL,
    clusterToken: `${name}-${randomBytes(4).toString("hex")}`,
  });
}

/** The pod's IP once its etcd container runs, or why it never will. */
async function started(
  deps: VerifyDeps,
  namespace: string,
  name: string,
  deadline: number,
): Promise<{ ip: string } | { problem: string }> {
  let last = "";
  while (Date.now() < deadline) {
    const pod = await deps.kube.getPod(namespace, name);
    if (!pod) return { problem: "the verification pod was deleted" };
    const bad = badBackup(pod);
    if (bad) return { problem: `the backup failed its checks: ${bad}` };
    const running = pod.status?.containerStatuses?.find((c) => c.name === "etcd")?.state?.running;
    if (running && pod.status?.podIP) return { ip: pod.status.podIP };
    last = seedProblem(pod) ?? pod.status?.phase ?? "";
    if (pod.status?.phase === "Failed") return { problem: `the verification pod failed: ${last}` };
    await sleep(500);
  }
  return { problem: `the restored etcd did not start in time${last ? ` (${last})` : ""}` };
}

/** Restores `taken` in a throwaway pod and compares what it holds with what the backup recorded. */
export async function verifyBackup(
  backup: EtcdBackup,
  taken: VerifiedBackup,
  deps: VerifyDeps,
): Promise<Verification> {
  const namespace = backup.metadata?.namespace ?? "default";
  const timeoutSeconds = backup.spec.verification?.timeoutInSecond ?? DEFAULT_VERIFY_TIMEOUT_SECONDS;
  const began = Date.now();
  const deadline = began + timeoutSeconds * 1000;
  const cluster = taken.cluster ? await deps.kube.getCluster(namespace, taken.cluster) : undefined;
  const pod = verificationPod(backup, taken, cluster?.spec.repository ?? DEFAULT_REPOSITORY, deps);
  const name = pod.metadata?.name ?? "";
  const outcome = (succeeded: boolean, message: string, extra: Partial<Verification> = {}): Verification => ({
    succeeded,
    time: new Date().toISOString(),
    backupPath: taken.path,
    durationSeconds: Math.round(Date.now() - began) / 1000,
    message,
    ...extra,
  });
  await deps.kube.createPod(pod);
  deps.log.info({ pod: name, path: taken.path }, "verifying the backup in a throwaway pod");
  try {
    const up = await started(deps, namespace, name, deadline);
    if ("problem" in up) return outcome(false, up.problem);
    const endpoint = `http://${up.ip}:${CLIENT_PORT}`;
    const plain: EtcdClientOptions = { ...deps.etcd, tls: undefined };
    let revision: number | undefined;
    while (Date.now() < deadline && revision === undefined) {
      const [status] = await endpointStatuses([endpoint], plain);
      if (status?.ok && status.leaderId !== "0") revision = Number(status.revision);
      else await sleep(300);
    }
    if (revision === undefined) return outcome(false, "the restored etcd did not answer in time");
    if (revision < taken.revision) {
      return outcome(
        false,
        `the restored store is at revision ${revision}, older than the backup's ${taken.revision}`,
        {
          revision,
        },
      );
    }
    const keyCount = await countKeys(endpoint, taken.revision, plain);
    if (taken.keyCount !== undefined && keyCount !== taken.keyCount) {
      return outcome(
        false,
        `the restored store holds ${keyCount ?? "no readable"} keys at revision ${taken.revision}, the backup recorded ${taken.keyCount}`,
        { revision, keyCount },
      );
    }
    return outcome(
      true,
      `restored into a single etcd ${taken.etcdVersion}: revision ${revision}, ${keyCount ?? "?"} keys at revision ${taken.revision}` +
        (taken.keyCount === undefined ? " (the backup recorded no key count)" : ", as recorded"),
      { revision, keyCount },
    );
  } finally {
    await deps.kube.deletePod(namespace, name, { gracePeriodSeconds: 0 }).catch((error: unknown) => {
      deps.log.warn(
        { err: error, pod: name },
        "could not delete the verification pod (its owner's deletion will)",
      );
    });
  }
}

// Pod volumes as directories on the host, bind-mounted into containers at their mountPaths:
// emptyDir (under the pod's folder), hostPath, persistentVolumeClaim (the bound PV's local
// directory), and files written from Secrets, ConfigMaps, the downward API and projected sources
// (service-account tokens included). Content volumes are refreshed on every pod sync, as a real
// kubelet does, so a changed Secret reaches running containers.
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import type {
  V1ConfigMapProjection,
  V1DownwardAPIVolumeFile,
  V1KeyToPath,
  V1Pod,
  V1SecretProjection,
  V1ServiceAccountTokenProjection,
  V1Volume,
  V1VolumeMount,
} from "@kubernetes/client-node";
import { fieldRefValue, MissingReferenceError, type ObjectSource, resourceFieldValue } from "./env.ts";

export interface VolumeSource extends ObjectSource {
  /** The host directory of the PV bound to a claim; undefined while the claim is not bound. */
  claimPath(namespace: string, claim: string): Promise<string | undefined>;
  serviceAccountToken(pod: V1Pod, projection: V1ServiceAccountTokenProjection): Promise<string>;
}

export interface PreparedVolume {
  name: string;
  hostPath: string;
  readOnly: boolean;
}

export interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
}

function safeRelativePath(path: string): string {
  const clean = normalize(path);
  if (clean.startsWith("/") || clean.startsWith("..")) {
    throw new MissingReferenceError(`volume item path "${path}" must be relative and stay inside the volume`);
  }
  return clean;
}

/** Writes a file only when its bytes changed, so readers never see a needless rewrite. */
function writeIfChanged(path: string, content: Buffer, mode: number): void {
  mkdirSync(dirname(path), { recursive: true });
  if (existsSync(path) && readFileSync(path).equals(content)) return;
  writeFileSync(path, content, { mode });
  chmodSync(path, mode);
}

type Files = Map<string, { content: Buffer; mode: number }>;

function keyedFiles(
  data: Record<string, Buffer>,
  items: V1KeyToPath[] | undefined,
  defaultMode: number,
  what: string,
  files: Files,
): void {
  if (items && items.length > 0) {
    for (const item of items) {
      const value = data[item.key];
      if (value === undefined) throw new MissingReferenceError(`couldn't find key ${item.key} in ${what}`);
      files.set(safeRelativePath(item.path), { content: value, mode: item.mode ?? defaultMode });
    }
    return;
  }
  for (const [key, value] of Object.entries(data))
    files.set(safeRelativePath(key), { content: value, mode: defaultMode });
}

function toBuffers(data: Record<string, string>): Record<string, Buffer> {
  return Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v)]));
}

async function secretFiles(
  pod: V1Pod,
  source: VolumeSource,
  ref: { name?: string; items?: V1KeyToPath[]; optional?: boolean },
  defaultMode: number,
  files: Files,
): Promise<void> {
  const ns = pod.metadata?.namespace ?? "default";
  const data = await source.secretData(ns, ref.name ?? "");
  if (!data) {
    if (ref.optional) return;
    throw new MissingReferenceError(`secret "${ref.name}" not found`);
  }
  keyedFiles(data, ref.items, defaultMode, `Secret ${ns}/${ref.name}`, files);
}

async function configMapFiles(
  pod: V1Pod,
  source: VolumeSource,
  ref: V1ConfigMapProjection,
  defaultMode: number,
  files: Files,
): Promise<void> {
  const ns = pod.metadata?.namespace ?? "default";
  const data = await source.configMapData(ns, ref.name ?? "");
  if (!data) {
    if (ref.optional) return;
    throw new MissingReferenceError(`configmap "${ref.name}" not found`);
  }
  keyedFiles(toBuffers(data), ref.items, defaultMode, `ConfigMap ${ns}/${ref.name}`, files);
}

function downwardFiles(
  pod: V1Pod,
  items: V1DownwardAPIVolumeFile[],
  defaultMode: number,
  addresses: { podIp: string; hostIp: string },
  files: Files,
): void {
  for (const item of items) {
    let value = "";
    if (item.fieldRef) value = fieldRefValue(pod, item.fieldRef, addresses.podIp, addresses.hostIp);
    else if (item.resourceFieldRef) {
      const container = pod.spec?.containers.find((c) => c.name === item.resourceFieldRef?.containerName);
      value = resourceFieldValue(container, item.resourceFieldRef);
    }
    files.set(safeRelativePath(item.path), { content: Buffer.from(value), mode: item.mode ?? defaultMode });
  }
}

/** Files of a content volume (secret, configMap, downwardAPI, projected); undefined for others. */
async function contentFiles(
  pod: V1Pod,
  volume: V1Volume,
  source: VolumeSource,
  addresses: { podIp: string; hostIp: string },
): Promise<Files | undefined> {
  const files: Files = new Map();
  if (volume.secret) {
    await secretFiles(
      pod,
      source,
      { name: volume.secret.secretName, items: volume.secret.items, optional: volume.secret.optional },
      volume.secret.defaultMode ?? 0o644,
      files,
    );
    return files;
  }
  if (volume.configMap) {
    await configMapFiles(pod, source, volume.configMap, volume.configMap.defaultMode ?? 0o644, files);
    return files;
  }
  if (volume.downwardAPI) {
    downwardFiles(
      pod,
      volume.downwardAPI.items ?? [],
      volume.downwardAPI.defaultMode ?? 0o644,
      addresses,
      files,
    );
    return files;
  }
  if (volume.projected) {
    const mode = volume.projected.defaultMode ?? 0o644;
    for (const projection of volume.projected.sources ?? []) {
      if (projection.secret)
        await secretFiles(pod, source, projection.secret as V1SecretProjection, mode, files);
      if (projection.configMap) await configMapFiles(pod, source, projection.configMap, mode, files);
      if (projection.downwardAPI)
        downwardFiles(pod, projection.downwardAPI.items ?? [], mode, addresses, files);
      if (projection.serviceAccountToken) {
        const token = await source.serviceAccountToken(pod, projection.serviceAccountToken);
        files.set(safeRelativePath(projection.serviceAccountToken.path), {
          content: Buffer.from(token),
          mode,
        });
      }
    }
    return files;
  }
  return undefined;
}

/**
 * Makes every volume of the pod exist on the host and returns where each one is. Called before
 * the first container starts and again on each sync (to refresh Secret/ConfigMap contents).
 */
export async function prepareVolumes(
  pod: V1Pod,
  podDir: string,
  source: VolumeSource,
  addresses: { podIp: string; hostIp: string },
): Promise<PreparedVolume[]> {
  const prepared: PreparedVolume[] = [];
  for (const volume of pod.spec?.volumes ?? []) {
    const dir = join(podDir, "volumes", volume.name);
    if (volume.emptyDir) {
      mkdirSync(dir, { recursive: true, mode: 0o777 });
      prepared.push({ name: volume.name, hostPath: dir, readOnly: false });
      continue;
    }
    if (volume.hostPath) {
      const type = volume.hostPath.type ?? "";
      if (type === "DirectoryOrCreate") mkdirSync(volume.hostPath.path, { recursive: true });
      else if (type === "FileOrCreate" && !existsSync(volume.hostPath.path)) {
        mkdirSync(dirname(volume.hostPath.path), { recursive: true });
        writeFileSync(volume.hostPath.path, "");
      } else if (type !== "" && !existsSync(volume.hostPath.path)) {
        throw new MissingReferenceError(`hostPath ${volume.hostPath.path} does not exist (type ${type})`);
      }
      prepared.push({ name: volume.name, hostPath: volume.hostPath.path, readOnly: false });
      continue;
    }
    if (volume.persistentVolumeClaim) {
      const ns = pod.metadata?.namespace ?? "default";
      const claim = volume.persistentVolumeClaim.claimName;
      const path = await source.claimPath(ns, claim);
      if (!path) throw new MissingReferenceError(`persistentvolumeclaim "${claim}" is not bound yet`);
      mkdirSync(path, { recursive: true });
      prepared.push({
        name: volume.name,
        hostPath: path,
        readOnly: volume.persistentVolumeClaim.readOnly ?? false,
      });
      continue;
    }
    const files = await contentFiles(pod, volume, source, addresses);
    if (files) {
      mkdirSync(dir, { recursive: true });
      for (const [path, file] of files) writeIfChanged(join(dir, path), file.content, file.mode);
      prepared.push({ name: volume.name, hostPath: dir, readOnly: true });
      continue;
    }
    throw new MissingReferenceError(`volume "${volume.name}" has a type the local kubelet does not support`);
  }
  return prepared;
}

/** The bind mounts of one container: its volumeMounts (with subPath), resolved to host paths. */
export function containerMounts(
  volumeMounts: V1VolumeMount[] | undefined,
  volumes: PreparedVolume[],
): Mount[] {
  return (volumeMounts ?? []).map((mount) => {
    const volume = volumes.find((v) => v.name === mount.name);
    if (!volume) throw new MissingReferenceError(`volumeMount "${mount.name}" names no volume of the pod`);
    let source = volume.hostPath;
    if (mount.subPath) {
      source = join(volume.hostPath, safeRelativePath(mount.subPath));
      if (!existsSync(source)) mkdirSync(source, { recursive: true });
    }
    return { source, target: mount.mountPath, readOnly: mount.readOnly ?? volume.readOnly };
  });
}

export function removePodDir(podDir: string): void {
  rmSync(podDir, { recursive: true, force: true });
}

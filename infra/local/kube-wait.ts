// Helpers for the end-to-end tests and the demo: API clients for a local cluster and polling waits that
// fail with what was last seen (never a bare timeout).

import { setTimeout as sleep } from "node:timers/promises";
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { PooledKubeConfig } from "../../shared/kube-config.ts";

export interface Clients {
  kc: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
}

export function clientsFor(kubeconfigPath: string): Clients {
  const kc = new PooledKubeConfig();
  kc.loadFromFile(kubeconfigPath);
  return { kc, core: kc.makeApiClient(CoreV1Api), apps: kc.makeApiClient(AppsV1Api) };
}

/** Polls `probe` until it returns a value other than undefined; throws with the last observation. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  options: { timeoutMs?: number; intervalMs?: number; describe?: () => Promise<string> } = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    await sleep(options.intervalMs ?? 250);
  }
  const seen = options.describe ? await options.describe().catch((e: unknown) => String(e)) : "";
  throw new Error(`timed out waiting for ${what}${seen ? `; last seen: ${seen}` : ""}`, { cause: lastError });
}

export function isReady(pod: V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

export async function readPod(core: CoreV1Api, namespace: string, name: string): Promise<V1Pod | undefined> {
  try {
    return await core.readNamespacedPod({ name, namespace });
  } catch (error) {
    if (typeof error === "object" && error !== null && "code" in error && error.code === 404)
      return undefined;
    throw error;
  }
}

export async function waitForPod(
  core: CoreV1Api,
  namespace: string,
  name: string,
  what: string,
  predicate: (pod: V1Pod) => boolean,
  timeoutMs = 60_000,
): Promise<V1Pod> {
  return waitFor(
    `pod ${namespace}/${name} ${what}`,
    async () => {
      const pod = await readPod(core, namespace, name);
      return pod && predicate(pod) ? pod : undefined;
    },
    {
      timeoutMs,
      describe: async () => JSON.stringify((await readPod(core, namespace, name))?.status ?? "gone"),
    },
  );
}

export async function waitForPodGone(
  core: CoreV1Api,
  namespace: string,
  name: string,
  timeoutMs = 60_000,
): Promise<void> {
  await waitFor(
    `pod ${namespace}/${name} to be gone`,
    async () => ((await readPod(core, namespace, name)) ? undefined : true),
    {
      timeoutMs,
    },
  );
}

/** Events recorded for an object, oldest first. */
export async function eventsFor(
  core: CoreV1Api,
  namespace: string,
  name: string,
): Promise<{ reason: string; message: string; type: string }[]> {
  const list = await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name}` });
  return list.items.map((e) => ({ reason: e.reason ?? "", message: e.message ?? "", type: e.type ?? "" }));
}

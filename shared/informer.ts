// An informer that keeps going. @kubernetes/client-node's ListWatch relists by itself on 410 Gone
// and reconnects after watch timeouts, but on any other error (apiserver restarting, connection
// refused, a failed list) it reports the error and stops. This wrapper restarts it with
// exponential backoff (200 ms doubling to 30 s, reset once it connects), so a watcher or kubelet
// survives apiserver restarts.
import {
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  makeInformer,
  type ObjectCache,
} from "@kubernetes/client-node";
import type { Logger } from "./log.ts";

export type ResilientInformer<T extends KubernetesObject> = Informer<T> & ObjectCache<T>;

const INITIAL_BACKOFF_MS = 200;
const MAX_BACKOFF_MS = 30_000;

export function resilientInformer<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  list: () => Promise<KubernetesListObject<T>>,
  log: Logger,
  labelSelector?: string,
): ResilientInformer<T> {
  const informer = makeInformer<T>(kc, path, list, labelSelector);
  let stopped = false;
  let backoffMs = INITIAL_BACKOFF_MS;
  let timer: NodeJS.Timeout | undefined;
  informer.on("connect", () => {
    backoffMs = INITIAL_BACKOFF_MS;
  });
  informer.on("error", (error: unknown) => {
    if (stopped) return;
    const delay = backoffMs;
    backoffMs = Math.min(backoffMs * 2, MAX_BACKOFF_MS);
    log.warn({ err: error, path, retryInMs: delay }, "watch failed; restarting");
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (!stopped) informer.start().catch(() => undefined);
    }, delay);
  });
  const stop = informer.stop.bind(informer);
  informer.stop = async () => {
    stopped = true;
    clearTimeout(timer);
    await stop();
  };
  return informer;
}

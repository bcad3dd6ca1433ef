// An informer that keeps going. @kubernetes/client-node's ListWatch relists by itself on 410 Gone
// and reconnects after watch timeouts, but on any other error (apiserver restarting, connection
// refused, a failed list) it reports the error and stops. This wrapper restarts it with
// exponential backoff (200 ms doubling to 30 s, reset once it connects), so a watcher or kubelet
// survives apiserver restarts.
//
// Its watches ask for bookmarks. client-node ends a watch that has been silent for 30 s and opens a
// new one, a new TLS connection with a handshake each time: at rest, with nothing changing, that was
// one handshake per watched resource every 30 s, the largest part of an idle operator's CPU. With
// bookmarks kube-apiserver sends a heartbeat on every watch about once a minute, so a silence of
// IDLE_WATCH_TIMEOUT_MS still means a dead connection and one watch lasts until the server ends it.
import {
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  ListWatch,
  type ObjectCache,
  Watch,
} from "@kubernetes/client-node";
import type { Logger } from "./log.ts";

export type ResilientInformer<T extends KubernetesObject> = Informer<T> & ObjectCache<T>;

/** kube-apiserver sends a bookmark on each watch about every 60 s; twice that silent is a dead connection. */
export const IDLE_WATCH_TIMEOUT_MS = 125_000;

class BookmarkedWatch extends Watch {
  constructor(kc: KubeConfig) {
    super(kc);
    // client-node keeps the inactivity timeout private; the property is what its watch() reads.
    Reflect.set(this, "requestTimeoutMs", IDLE_WATCH_TIMEOUT_MS);
  }

  override watch(
    ...[path, queryParams, callback, done]: Parameters<Watch["watch"]>
  ): ReturnType<Watch["watch"]> {
    return super.watch(path, { ...queryParams, allowWatchBookmarks: true }, callback, done);
  }
}

const INITIAL_BACKOFF_MS = 200;
const MAX_BACKOFF_MS = 30_000;

export function resilientInformer<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  list: () => Promise<KubernetesListObject<T>>,
  log: Logger,
  labelSelector?: string,
): ResilientInformer<T> {
  const informer = new ListWatch<T>(path, new BookmarkedWatch(kc), list, false, labelSelector);
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

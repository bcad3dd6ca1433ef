// A KubeConfig whose API calls share connections. @kubernetes/client-node 2.x builds a new undici
// Agent for every request, so every call opens a new TLS connection to the API server: a full
// handshake (with a client certificate here) and a fresh OpenSSL context each time. Measured on a
// worker making ~50 calls/s: most of its CPU, and RSS growing to ~400 MiB with a JS heap of ~70 MiB.
// This class keeps one dispatcher per API server and user and hands it to every request.
import { KubeConfig } from "@kubernetes/client-node";

type RequestContext = Parameters<KubeConfig["applySecurityAuthentication"]>[0];
type Dispatcher = NonNullable<ReturnType<RequestContext["getDispatcher"]>>;

/**
 * How long one dispatcher serves before the next request builds a new one: client certificates
 * handed out by exec plugins rotate, and a pooled connection would keep the old one forever.
 */
export const DISPATCHER_MAX_AGE_MS = 10 * 60_000;

export class PooledKubeConfig extends KubeConfig {
  private readonly pool = new Map<string, { dispatcher: Dispatcher; createdAt: number }>();

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    const fresh = context.getDispatcher();
    if (fresh === undefined) return;
    const key = `${this.getCurrentCluster()?.server ?? ""}\n${this.getCurrentUser()?.name ?? ""}`;
    const now = Date.now();
    const pooled = this.pool.get(key);
    if (pooled && now - pooled.createdAt < DISPATCHER_MAX_AGE_MS) {
      // The fresh agent never connected; dropping it costs nothing.
      context.setDispatcher(pooled.dispatcher);
      return;
    }
    this.pool.set(key, { dispatcher: fresh, createdAt: now });
    // Requests in flight on the old one finish; close() waits for them.
    if (pooled) void pooled.dispatcher.close().catch(() => {});
  }
}

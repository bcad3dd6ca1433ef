// What a process says about its Redis connections: when one is lost (an outage, a restart, a
// Sentinel failover) one warning, then a reminder at most every 30 s while it stays down, and one
// line when it is back with how long it was gone; the gauge etcd_operator_redis_connected and the
// counter etcd_operator_redis_disconnects_total say the same to Prometheus. ioredis emits an error
// per reconnect attempt (several a second), and BullMQ repeats them on its workers and queues:
// logged one by one they would bury everything else during a long outage.
import type { Redis } from "ioredis";
import type { Logger } from "./log.ts";
import { operatorMetrics } from "./metrics.ts";

const REMIND_EVERY_MS = 30_000;

export interface RedisHealth {
  /** Whether the connection is ready now. */
  connected(): boolean;
  /** Counts an error from something that uses the connection (a BullMQ worker or queue). */
  error(error: unknown): void;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Watches one connection (named for logs and metrics: "commands", "worker", "backups", "http").
 * `where` says which Redis, without secrets (describeRedis).
 */
export function watchRedis(connection: Redis, name: string, where: string, log: Logger): RedisHealth {
  const metrics = operatorMetrics();
  let up = connection.status === "ready";
  let downSince: number | undefined;
  let lastReport = 0;
  let errorsSinceReport = 0;
  let lastError = "";
  metrics.redisConnected.set({ connection: name }, up ? 1 : 0);

  const lost = (why: string) => {
    if (downSince !== undefined) return;
    downSince = Date.now();
    lastReport = downSince;
    errorsSinceReport = 0;
    up = false;
    metrics.redisConnected.set({ connection: name }, 0);
    metrics.redisDisconnects.inc({ connection: name });
    log.warn(
      { connection: name, redis: where, reason: why },
      "Redis connection lost; steps wait until it is back",
    );
  };
  const error = (cause: unknown) => {
    lastError = describe(cause);
    if (downSince === undefined) {
      // An error on a connection that is still up (a command refused) is not an outage.
      if (connection.status === "ready") return;
      lost(lastError);
      return;
    }
    errorsSinceReport++;
    const now = Date.now();
    if (now - lastReport < REMIND_EVERY_MS) return;
    log.warn(
      {
        connection: name,
        redis: where,
        downSeconds: Math.round((now - downSince) / 1000),
        errors: errorsSinceReport,
        lastError,
      },
      "Redis still unreachable",
    );
    lastReport = now;
    errorsSinceReport = 0;
  };
  connection.on("error", error);
  // Emitted when ioredis sets out to reconnect: a lost connection, never a deliberate disconnect.
  connection.on("reconnecting", () => lost(lastError || "connection closed"));
  connection.on("ready", () => {
    up = true;
    metrics.redisConnected.set({ connection: name }, 1);
    if (downSince !== undefined) {
      log.info(
        { connection: name, redis: where, downSeconds: Number(((Date.now() - downSince) / 1000).toFixed(1)) },
        "Redis connection back",
      );
    }
    downSince = undefined;
    lastError = "";
  });
  return { connected: () => up, error };
}

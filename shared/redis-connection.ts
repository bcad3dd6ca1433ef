// How every process reaches the queue's Redis: one URL, or a Redis Sentinel group that names the
// current primary. With Sentinel, ioredis asks the sentinels for the primary on every (re)connect
// and follows a failover by itself; BullMQ's blocking connections are duplicates of these and
// follow it too. Nothing else constructs an ioredis client, so both modes behave the same.
import { readFileSync } from "node:fs";
import { Redis, type RedisOptions } from "ioredis";
import type { OperatorConfig } from "./config.ts";

export interface SentinelAddress {
  host: string;
  port: number;
}

/** A Sentinel group: where the sentinels answer and which primary they watch. */
export interface RedisSentinelTarget {
  sentinels: SentinelAddress[];
  /** The primary's name in the sentinels' configuration (`sentinel monitor <name> …`). */
  masterName: string;
  /** Password of the Redis servers (AUTH), if they ask for one. */
  password?: string;
  /** Password of the sentinels themselves, if they ask for one (Redis `requirepass` on a sentinel). */
  sentinelPassword?: string;
  /** TLS towards the Redis servers and the sentinels. */
  tls: boolean;
}

type RedisSettings = Pick<OperatorConfig, "redisUrl" | "redisSentinel" | "redisPassword" | "redisTlsCaFile">;

/**
 * Replicas that must hold a new per-cluster lease before a step runs (Redis WAIT): with a Sentinel
 * group, the replica promoted after the primary is lost then knows who holds each cluster, so no
 * second worker can take a cluster whose step is still running.
 */
export function leaseReplicas(config: Pick<OperatorConfig, "redisSentinel">): number {
  return config.redisSentinel ? 1 : 0;
}

/** Parses "host:port,host:port" (IPv6 as [addr]:port); the port defaults to 26379. */
export function parseSentinelAddresses(raw: string): SentinelAddress[] {
  const entries = raw
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  return entries.map((entry) => {
    const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::(\d+))?$/.exec(entry);
    const port = match?.[2] === undefined ? 26379 : Number(match[2]);
    if (!match?.[1] || !Number.isInteger(port) || port < 1 || port > 65535) {
      throw new Error(`"${entry}" is not host:port`);
    }
    return { host: match[1].replace(/^\[|\]$/g, ""), port };
  });
}

/**
 * A connection with a command in flight and nothing received for this long is taken for dead and
 * made again. Redis on a lost node, or a pod gone with its IP, sends no reset: without this a
 * command waited for TCP's retransmissions to give up (~15 min), and the process with it. Above
 * BullMQ's longest blocking wait (its idle poll, IDLE_POLL_SECONDS).
 */
export const REDIS_SOCKET_TIMEOUT_MS = 20_000;

/**
 * How long a sentinel may take to name the primary before the next one is asked. A sentinel that
 * takes the connection and answers nothing (stopped, starved, or an address that now leads
 * somewhere else, as a lost node's can) otherwise held the connect forever: ioredis sets no limit.
 * Sentinels answer in milliseconds, during an election too.
 */
export const SENTINEL_COMMAND_TIMEOUT_MS = 3_000;

/** ioredis options for the configured Redis (without the URL, which ioredis takes separately). */
export function redisClientOptions(config: RedisSettings, extra: RedisOptions): RedisOptions {
  const ca = config.redisTlsCaFile ? { ca: readFileSync(config.redisTlsCaFile) } : {};
  const sentinel = config.redisSentinel;
  if (!sentinel) {
    return {
      socketTimeout: REDIS_SOCKET_TIMEOUT_MS,
      ...(config.redisPassword ? { password: config.redisPassword } : {}),
      // rediss:// turns TLS on in ioredis; the CA is added to it.
      ...(config.redisTlsCaFile && config.redisUrl.startsWith("rediss:") ? { tls: ca } : {}),
      ...extra,
    };
  }
  const tls = sentinel.tls ? ca : undefined;
  return {
    socketTimeout: REDIS_SOCKET_TIMEOUT_MS,
    sentinels: sentinel.sentinels,
    name: sentinel.masterName,
    ...(config.redisPassword ? { password: config.redisPassword } : {}),
    ...(sentinel.sentinelPassword ? { sentinelPassword: sentinel.sentinelPassword } : {}),
    ...(tls ? { tls, sentinelTLS: tls, enableTLSForSentinelMode: true } : {}),
    // Sentinels answer within a second or two while they elect; keep asking instead of giving up
    // after the first round (ioredis's default stops retrying the sentinel list).
    sentinelRetryStrategy: (times: number) => Math.min(100 * times, 1_000),
    sentinelCommandTimeout: SENTINEL_COMMAND_TIMEOUT_MS,
    // A failover also closes the old primary's connections; asking the sentinels again at once
    // (instead of waiting for the socket to time out) is what makes the switch take a second.
    failoverDetector: true,
    ...extra,
  };
}

/** How long a client that ended without being closed waits before it connects again. */
export const RESTART_AFTER_END_MS = 1_000;

/**
 * An ioredis client that connects again when it ended without being closed. ioredis ends a Sentinel
 * client for good when its failover detector (left from the connection before) fires while the
 * client is asking the sentinels for the new primary: the connector throws "Connection is closed.",
 * the client's status becomes "end" and every later command fails with that, in a process that
 * otherwise looks alive. Its duplicates (BullMQ's blocking connections) are of the same kind.
 */
export class ResilientRedis extends Redis {
  #closed = false;

  constructor(url: string | undefined, options: RedisOptions & { replyMapping?: "legacy" }) {
    if (url === undefined) super(options);
    else super(url, options);
    this.on("end", () => {
      if (this.#closed) return;
      const restart = setTimeout(() => {
        if (!this.#closed && this.status === "end") this.connect().catch(() => undefined);
      }, RESTART_AFTER_END_MS);
      restart.unref();
    });
    // ioredis types duplicate() generically over its reply mapping, which a subclass cannot
    // override: the instance gets its own. Writable and configurable, as BullMQ's proxy of the
    // client returns a duplicate() of its own (a proxy may not for a fixed property).
    Object.defineProperty(this, "duplicate", {
      value: (override?: Partial<RedisOptions>) =>
        new ResilientRedis(undefined, { ...this.options, ...(override ?? {}), replyMapping: "legacy" }),
      writable: true,
      configurable: true,
    });
  }

  override disconnect(reconnect = false): void {
    if (!reconnect) this.#closed = true;
    super.disconnect(reconnect);
  }

  override quit(...args: Parameters<Redis["quit"]>): ReturnType<Redis["quit"]> {
    this.#closed = true;
    return super.quit(...args);
  }
}

/** A new ioredis client for the configured Redis (URL or Sentinel group). */
export function connectRedis(config: RedisSettings, extra: RedisOptions = {}): Redis {
  const options = { ...redisClientOptions(config, extra), replyMapping: "legacy" as const };
  return new ResilientRedis(config.redisSentinel ? undefined : config.redisUrl, options);
}

/** Where the configured Redis is, for logs and messages (never with a password). */
export function describeRedis(config: Pick<OperatorConfig, "redisUrl" | "redisSentinel">): string {
  const sentinel = config.redisSentinel;
  if (sentinel) {
    const addresses = sentinel.sentinels.map((s) => `${s.host}:${s.port}`).join(",");
    return `sentinel ${sentinel.masterName} via ${addresses}`;
  }
  try {
    const url = new URL(config.redisUrl);
    url.password = "";
    url.username = "";
    return url.toString();
  } catch {
    return "redis (unparsable URL)";
  }
}

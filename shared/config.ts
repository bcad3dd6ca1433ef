// The operator's configuration, read once from the environment by `loadConfig(env)`; nothing
// else reads process.env. Names follow the coreos Deployment where one existed
// (MY_POD_NAMESPACE, -cluster-wide as CLUSTER_WIDE).
import { parseSentinelAddresses, type RedisSentinelTarget } from "./redis-connection.ts";

export interface OperatorConfig {
  /** Namespace watched in namespaced mode (and where the operator runs). */
  namespace: string;
  /** Watch all namespaces, taking only clusters annotated etcd.database.coreos.com/scope=clusterwide. */
  clusterWide: boolean;
  /** BullMQ's Redis, when no Sentinel group is given. */
  redisUrl: string;
  /** A Redis Sentinel group instead of redisUrl (REDIS_SENTINELS, REDIS_SENTINEL_MASTER, …). */
  redisSentinel?: RedisSentinelTarget;
  /** Password of the Redis servers (REDIS_PASSWORD), besides one in redisUrl; never logged. */
  redisPassword?: string;
  /** PEM file of a private CA that signed the Redis servers' (and sentinels') certificates. */
  redisTlsCaFile?: string;
  /**
   * How often each cluster at rest is looked at (spread: each cluster on its own time); steps chain
   * and events bring looks at once without waiting for it.
   */
  reconcileIntervalMs: number;
  /**
   * A cluster at rest gets a full look (API objects, every member) at least this often; the looks
   * in between ask one member (shared/look.ts). At most reconcileIntervalMs: every look is a full
   * one.
   */
  fullLookIntervalMs: number;
  /** Create or update the CRDs at start-up. */
  installCrds: boolean;
  workerConcurrency: number;
  /** Per-RPC timeout towards etcd members. */
  etcdTimeoutMs: number;
  /** A voting member whose pod stays not Ready this long is replaced. */
  memberUnhealthyGraceMs: number;
  /** How long a worker's per-cluster lease lives without renewal (a killed worker's lease expires after it). */
  leaseTtlMs: number;
  logLevel: string;
  logPretty: boolean;
  /** The operator's own image; restores run their init containers from it. */
  operatorImage: string;
  /** Backups and restores in parallel per worker process (each streams one snapshot). */
  backupConcurrency: number;
  /**
   * Chaos mode for test environments (coreos's --chaos-level): 0 is off; at level N (1–10) the
   * scheduler deletes a random member pod of each opted-in, healthy cluster with probability N/10
   * every chaosIntervalMs.
   */
  chaosLevel: number;
  chaosIntervalMs: number;
  /**
   * The memory keeper (infra/memory-keeper.ts): how often it looks, 0 for never, and how much the
   * heap and Buffers must have grown since its last major collection for it to start one; and how
   * much malloc's free chunks must have grown since its last malloc_trim for the next, 0 for never.
   */
  memoryGcIntervalMs: number;
  memoryGcGrowthMiB: number;
  memoryTrimGrowthMiB: number;
  // --- HTTP server (infra/http): API, admission webhook, health, metrics, dashboard ---
  /** Port of the HTTP server; 0 picks a free one (tests). */
  httpPort: number;
  httpHost: string;
  /** PEM files of the serving certificate (e.g. from cert-manager); both or neither. */
  httpTlsCertFile?: string;
  httpTlsKeyFile?: string;
  /** Without certificate files: serve TLS with a certificate from a CA made at start-up. */
  httpTlsSelfSigned: boolean;
  /** DNS names and IPs the self-signed certificate is valid for. */
  httpTlsHosts: string[];
  /**
   * With httpTlsSelfSigned: the Secret (in the operator's namespace) that keeps the CA and
   * certificate, so that every replica and restart serves the same one.
   */
  httpTlsSecret?: string;
  /** The ValidatingWebhookConfiguration whose caBundle the server keeps set to its self-signed CA. */
  webhookConfigurationName?: string;
  /** A fixed bearer token for local use, besides Kubernetes tokens; never logged. */
  httpStaticToken?: string;
  /** Requests per minute per client address before 429. */
  httpRateLimitPerMinute: number;
  /** /metrics asks for a token (and `get` on the non-resource URL /metrics), like kube-rbac-proxy. */
  metricsRequireAuth: boolean;
  /** Roles without the HTTP server (watcher, worker, scheduler) serve health and metrics on this port; 0: off. */
  metricsPort: number;
  /**
   * How long the HTTP server keeps serving after SIGTERM, before it closes: behind a Service,
   * kube-proxy may send new connections to a terminating pod until it has seen the pod go.
   */
  httpShutdownDelayMs: number;
}

export const DEFAULT_OPERATOR_IMAGE = "ghcr.io/etcd-operator-ts/etcd-operator:v0.1.0";

export class ConfigError extends Error {
  override name = "ConfigError";
}

function bool(env: Record<string, string | undefined>, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new ConfigError(`${name} must be true or false, got "${raw}"`);
}

function int(
  env: Record<string, string | undefined>,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
  }
  return value;
}

/** The Sentinel group from REDIS_SENTINELS and its companions, or undefined without it. */
function sentinelConfig(env: Record<string, string | undefined>): RedisSentinelTarget | undefined {
  const raw = env.REDIS_SENTINELS;
  const companions = ["REDIS_SENTINEL_MASTER", "REDIS_SENTINEL_PASSWORD", "REDIS_SENTINEL_TLS"];
  if (!raw) {
    const stray = companions.find((name) => env[name]);
    if (stray) throw new ConfigError(`${stray} is set but REDIS_SENTINELS is not`);
    return undefined;
  }
  if (env.REDIS_URL) {
    throw new ConfigError("REDIS_URL and REDIS_SENTINELS are both set: give one or the other");
  }
  let sentinels: RedisSentinelTarget["sentinels"];
  try {
    sentinels = parseSentinelAddresses(raw);
  } catch (error) {
    throw new ConfigError(`REDIS_SENTINELS: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
    });
  }
  if (sentinels.length === 0) throw new ConfigError("REDIS_SENTINELS names no sentinel");
  const masterName = env.REDIS_SENTINEL_MASTER || "mymaster";
  if (!/^[A-Za-z0-9._-]+$/.test(masterName)) {
    throw new ConfigError(`REDIS_SENTINEL_MASTER "${masterName}" is not a valid master name`);
  }
  return {
    sentinels,
    masterName,
    ...(env.REDIS_SENTINEL_PASSWORD ? { sentinelPassword: env.REDIS_SENTINEL_PASSWORD } : {}),
    tls: bool(env, "REDIS_SENTINEL_TLS", false),
  };
}

export function loadConfig(env: Record<string, string | undefined>): OperatorConfig {
  const namespace = env.MY_POD_NAMESPACE || env.WATCH_NAMESPACE || "default";
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(namespace)) {
    throw new ConfigError(`namespace "${namespace}" (MY_POD_NAMESPACE) is not a valid namespace name`);
  }
  const redisUrl = env.REDIS_URL || "redis://127.0.0.1:6379";
  if (!/^rediss?:\/\//.test(redisUrl))
    throw new ConfigError(`REDIS_URL must start with redis:// or rediss://`);
  const redisSentinel = sentinelConfig(env);
  return {
    namespace,
    clusterWide: bool(env, "CLUSTER_WIDE", false),
    redisUrl,
    ...(redisSentinel ? { redisSentinel } : {}),
    ...(env.REDIS_PASSWORD ? { redisPassword: env.REDIS_PASSWORD } : {}),
    ...(env.REDIS_TLS_CA_FILE ? { redisTlsCaFile: env.REDIS_TLS_CA_FILE } : {}),
    reconcileIntervalMs: int(env, "RECONCILE_INTERVAL_MS", 8_000, 500, 3_600_000),
    fullLookIntervalMs: int(env, "FULL_LOOK_INTERVAL_MS", 300_000, 500, 86_400_000),
    installCrds: bool(env, "INSTALL_CRDS", false),
    workerConcurrency: int(env, "WORKER_CONCURRENCY", 32, 1, 256),
    etcdTimeoutMs: int(env, "ETCD_TIMEOUT_MS", 3_000, 100, 60_000),
    memberUnhealthyGraceMs: int(env, "MEMBER_UNHEALTHY_GRACE_MS", 60_000, 1_000, 86_400_000),
    leaseTtlMs: int(env, "LEASE_TTL_MS", 10_000, 1_000, 600_000),
    logLevel: env.LOG_LEVEL || "info",
    logPretty: bool(env, "LOG_PRETTY", false),
    operatorImage: env.OPERATOR_IMAGE || DEFAULT_OPERATOR_IMAGE,
    backupConcurrency: int(env, "BACKUP_CONCURRENCY", 2, 1, 64),
    chaosLevel: int(env, "CHAOS_LEVEL", 0, 0, 10),
    chaosIntervalMs: int(env, "CHAOS_INTERVAL_MS", 30_000, 1_000, 86_400_000),
    memoryGcIntervalMs: int(env, "MEMORY_GC_INTERVAL_MS", 2_000, 0, 3_600_000),
    memoryGcGrowthMiB: int(env, "MEMORY_GC_GROWTH_MIB", 8, 1, 65_536),
    memoryTrimGrowthMiB: int(env, "MEMORY_TRIM_GROWTH_MIB", 4, 0, 65_536),
    ...httpConfig(env),
  };
}

type HttpConfig = Pick<
  OperatorConfig,
  | "httpPort"
  | "httpHost"
  | "httpTlsCertFile"
  | "httpTlsKeyFile"
  | "httpTlsSelfSigned"
  | "httpTlsHosts"
  | "httpTlsSecret"
  | "webhookConfigurationName"
  | "httpStaticToken"
  | "httpRateLimitPerMinute"
  | "metricsRequireAuth"
  | "metricsPort"
  | "httpShutdownDelayMs"
>;

/** Shortest static token accepted: a guessable token would open the API to anyone who can reach it. */
export const MIN_STATIC_TOKEN_LENGTH = 24;

function httpConfig(env: Record<string, string | undefined>): HttpConfig {
  const certFile = env.HTTP_TLS_CERT_FILE || undefined;
  const keyFile = env.HTTP_TLS_KEY_FILE || undefined;
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new ConfigError("HTTP_TLS_CERT_FILE and HTTP_TLS_KEY_FILE go together: give both or neither");
  }
  const staticToken = env.HTTP_STATIC_TOKEN || undefined;
  if (staticToken !== undefined && staticToken.length < MIN_STATIC_TOKEN_LENGTH) {
    // The value itself is never echoed: it is a secret even when it is too short.
    throw new ConfigError(
      `HTTP_STATIC_TOKEN must be at least ${MIN_STATIC_TOKEN_LENGTH} characters (e.g. from \`openssl rand -hex 24\`)`,
    );
  }
  const hosts = (env.HTTP_TLS_HOSTS || "localhost,127.0.0.1")
    .split(",")
    .map((h) => h.trim())
    .filter(Boolean);
  return {
    httpPort: int(env, "HTTP_PORT", 8080, 0, 65_535),
    httpHost: env.HTTP_HOST || "0.0.0.0",
    httpTlsCertFile: certFile,
    httpTlsKeyFile: keyFile,
    httpTlsSelfSigned: bool(env, "HTTP_TLS_SELF_SIGNED", false),
    httpTlsHosts: hosts,
    httpTlsSecret: env.HTTP_TLS_SECRET || undefined,
    webhookConfigurationName: env.WEBHOOK_CONFIGURATION || undefined,
    httpStaticToken: staticToken,
    httpRateLimitPerMinute: int(env, "HTTP_RATE_LIMIT_PER_MINUTE", 600, 1, 1_000_000),
    metricsRequireAuth: bool(env, "METRICS_REQUIRE_AUTH", true),
    metricsPort: int(env, "METRICS_PORT", 0, 0, 65_535),
    httpShutdownDelayMs: int(env, "HTTP_SHUTDOWN_DELAY_MS", 0, 0, 60_000),
  };
}

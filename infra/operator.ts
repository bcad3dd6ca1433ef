// The long-running entry point. One process runs watcher, worker, scheduler and the HTTP server
// for small installs (`--role all`, the default), or one role each for scale:
//   node infra/operator.ts [--role all|watcher|worker|scheduler|http]
// The HTTP server (infra/http) serves the API, admission webhook, health, metrics and dashboard on
// HTTP_PORT; the watcher, worker and scheduler roles serve health and metrics on METRICS_PORT when set.
// Configuration comes from the environment (shared/config.ts); the kubeconfig from KUBECONFIG or
// the in-cluster service account. SIGTERM/SIGINT close everything gracefully: the worker
// finishes its current step, the watcher stops its watches, Redis connections close.
import { parseArgs } from "node:util";
import type { KubeConfig } from "@kubernetes/client-node";
import { Queue, type Worker } from "bullmq";
import type { Redis } from "ioredis";
import { loadConfig, type OperatorConfig } from "../shared/config.ts";
import { Kube } from "../shared/kube.ts";
import { PooledKubeConfig } from "../shared/kube-config.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { BACKUP_QUEUE, RECONCILE_QUEUE } from "../shared/queue.ts";
import { floorRaiser } from "../shared/read-floor.ts";
import { connectRedis, describeRedis } from "../shared/redis-connection.ts";
import { watchRedis } from "../shared/redis-health.ts";
import type { RunningHttp } from "./http/server.ts";
import { loadMallocTrimmer } from "./malloc-trim.ts";
import { startMemoryKeeper } from "./memory-keeper.ts";
import type { Watcher } from "./watcher.ts";

export type Role = "all" | "watcher" | "worker" | "scheduler" | "http";
const ROLES: readonly Role[] = ["all", "watcher", "worker", "scheduler", "http"];

export interface RunningOperator {
  /** Resolves once the watcher has enqueued every existing cluster (immediately without a watcher). */
  ready: Promise<void>;
  /** Where the HTTP server (or the metrics listener) answers, when this process runs one. */
  httpUrl?: string;
  stop(): Promise<void>;
}

export async function startOperator(options: {
  kc: KubeConfig;
  config: OperatorConfig;
  log: Logger;
  role?: Role;
}): Promise<RunningOperator> {
  const { kc, config, log } = options;
  const role = options.role ?? "all";
  const redis = connectRedis(config, { maxRetriesPerRequest: null });
  const where = describeRedis(config);
  const redisHealth = watchRedis(redis, "commands", where, log);
  const queue = new Queue(RECONCILE_QUEUE, { connection: redis });
  const backupQueue = new Queue(BACKUP_QUEUE, { connection: redis });
  // The queues share the commands connection: their errors are its errors.
  for (const q of [queue, backupQueue]) q.on("error", (error) => redisHealth.error(error));
  const closers: (() => Promise<void>)[] = [];
  let watcher: Watcher | undefined;
  let backupsReady: Promise<void> | undefined;
  let worker: Worker | undefined;
  let workerConnection: Redis | undefined;
  // Every write to an EtcdCluster raises its read floor (shared/read-floor.ts).
  const newKube = () => new Kube(kc, { onClusterVersion: floorRaiser(redis) });

  // HTTP server: the whole API in roles all and http; health and metrics only in the others, on
  // METRICS_PORT. Started first, so a port in use fails the start before anything else runs.
  // Each role's modules load only in a process that runs it: a worker has no use for fastify and
  // the dashboard, nor a watcher for the worker's steps (tens of MiB of resident memory each).
  let http: RunningHttp | undefined;
  try {
    if (role === "all" || role === "http" || config.metricsPort > 0) {
      const { startHttp } = await import("./http/server.ts");
      http =
        role === "all" || role === "http"
          ? await startHttp({ kc, config, log, mode: "full" })
          : await startHttp({ kc, config, log, mode: "probes", port: config.metricsPort });
    }
  } catch (error) {
    await queue.close();
    redis.disconnect();
    throw error;
  }
  if (config.installCrds && (role === "all" || role === "watcher")) {
    const { installCrds } = await import("./crds.ts");
    await installCrds(kc);
    log.info("CRDs installed or up to date");
  }
  if (role === "all" || role === "scheduler") {
    const { guardSchedules } = await import("./scheduler.ts");
    const { startChaos } = await import("./chaos.ts");
    const { resyncAll } = await import("./worker.ts");
    const { resyncBackups } = await import("./backup-schedules.ts");
    const kube = newKube();
    // After Redis lost its data: every cluster's job, backup schedule and pending restore at once.
    const rebuild = async () => {
      const added = await resyncAll({ kube, queue, config });
      await resyncBackups(kube, backupQueue, config);
      return added;
    };
    const guard = await guardSchedules(queue, redis, config, rebuild, log);
    closers.push(async () => guard.stop());
    log.info(
      { lookEveryMs: config.reconcileIntervalMs, fullLookEveryMs: config.fullLookIntervalMs },
      "looks at clusters at rest scheduled",
    );
    const chaos = startChaos({ kube, redis, config, log });
    closers.push(async () => chaos.stop());
  }
  if (role === "all" || role === "worker") {
    const { startWorker } = await import("./worker.ts");
    const { startBackupWorker } = await import("./backup-worker.ts");
    workerConnection = connectRedis(config, { maxRetriesPerRequest: null });
    worker = startWorker({
      redisHealth: watchRedis(workerConnection, "worker", where, log),
      kube: newKube(),
      redis,
      connection: workerConnection,
      queue,
      backupQueue,
      config,
      log,
    });
    const started = worker;
    const connection = workerConnection;
    closers.push(async () => {
      await started.close(connection.status !== "ready");
    });
    log.info({ concurrency: config.workerConcurrency }, "worker started");
    const backupConnection = connectRedis(config, { maxRetriesPerRequest: null });
    const backupWorker = startBackupWorker({
      redisHealth: watchRedis(backupConnection, "backups", where, log),
      kube: newKube(),
      redis,
      connection: backupConnection,
      queue: backupQueue,
      config,
      log,
    });
    closers.push(async () => {
      await backupWorker.close(backupConnection.status !== "ready");
      backupConnection.disconnect();
    });
  }
  if (role === "all" || role === "watcher") {
    const { startWatcher } = await import("./watcher.ts");
    const { startBackupWatcher } = await import("./backup-watcher.ts");
    watcher = startWatcher({ kc, queue, redis, config, log });
    const started = watcher;
    closers.push(() => started.stop());
    const backups = startBackupWatcher({ kc, backupQueue, config, log });
    backupsReady = backups.ready;
    closers.push(() => backups.stop());
  }
  return {
    ready: Promise.all([watcher?.ready, backupsReady]).then(() => undefined),
    httpUrl: http?.url,
    async stop() {
      // Stop taking requests first, then the roles. A worker whose Redis is unreachable closes at
      // once (force): BullMQ's graceful close would wait for Redis until the kubelet's SIGKILL, 60 s
      // on every uninstall; the job's lock then lapses and its lease keeps the half-done step safe.
      await http?.close().catch((error: unknown) => log.warn({ err: error }, "HTTP server close failed"));
      for (const close of closers.reverse())
        await close().catch((error: unknown) => log.warn({ err: error }, "close failed"));
      await queue.close();
      await backupQueue.close();
      redis.disconnect();
      workerConnection?.disconnect();
    },
  };
}

/**
 * Node flags the operator runs with (the Dockerfile, the test helpers and the docs use these).
 * A backup streams GiBs through gRPC messages and upload parts, all short-lived garbage; with V8's
 * default young generation (which grows to tens of MiB under that allocation rate) the worker's
 * RSS would rise by ~90 MiB during a backup. A 2 MiB semi-space keeps it under ~50 MiB at the cost
 * of more, cheaper scavenges. --expose-gc lets the memory keeper (infra/memory-keeper.ts) start
 * major collections of a busy process's old garbage. Without allocation-site pretenuring: after a
 * collection taken while the process was quiet (everything alive then), V8 decided to allocate
 * the objects of some sites straight into the old generation, and a later backup's stream then
 * filled it at ~100 MB/s: ten mark-compacts a second, 2.5× the worker's CPU for the backup
 * (--trace-gc in bench/backup.ts: 85 mark-compacts instead of 6; worker 7.9 CPU-s instead of 3.2
 * for 0.5 GiB).
 */
export const OPERATOR_NODE_FLAGS = [
  "--max-semi-space-size=2",
  "--expose-gc",
  "--no-allocation-site-pretenuring",
] as const;

/**
 * Environment the operator's processes run with (the Dockerfile's ENV; the test helpers use it).
 * glibc gives each thread that allocates its own malloc arena (V8's 4 platform threads, libuv's 4)
 * and each keeps what it freed: two arenas took 13 MiB off a busy worker's RSS (bench/control.ts,
 * with the memory keeper) for no measurable CPU.
 * A fixed mmap threshold of 128 KiB (glibc's starting value) keeps larger blocks out of the arenas:
 * by default glibc raises the threshold each time a mapped block is freed, after which such
 * blocks are carved from the arenas and leave holes there. bench/control.ts workers: 145–150 MiB
 * (6 workers) against 145–158 (10); CPU per reconcile 0.40 against 0.37 ms (medians), a backup's
 * worker CPU unchanged (3.2–3.7 s per 1.2 GiB).
 */
export const OPERATOR_ENV = { MALLOC_ARENA_MAX: "2", MALLOC_MMAP_THRESHOLD_: "131072" } as const;

const mib = (bytes: number) => Math.round(bytes / 1024 / 1024);
/** How many times MEMORY_GC_INTERVAL_MS the memory keeper waits between looks while nothing moves. */
const MEMORY_IDLE_BACKOFF = 16;

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { role: { type: "string", default: "all" } } });
  const role = ROLES.find((r) => r === values.role);
  if (!role) throw new Error(`--role must be one of ${ROLES.join(", ")}, got "${values.role}"`);
  const config = loadConfig(process.env);
  const log = createLogger({ level: config.logLevel, pretty: config.logPretty }).child({
    component: `operator-${role}`,
  });
  const missing = OPERATOR_NODE_FLAGS.filter(
    (flag) => !process.execArgv.includes(flag) && !process.env.NODE_OPTIONS?.includes(flag),
  );
  if (missing.length > 0) {
    log.warn({ missing }, "node runs without the operator's flags; backups will use more memory than needed");
  }
  const trimmer = loadMallocTrimmer();
  if ("reason" in trimmer && config.memoryTrimGrowthMiB > 0) {
    log.warn({ reason: trimmer.reason }, "no malloc_trim: the process keeps the pages malloc freed");
  }
  const keeper = startMemoryKeeper({
    intervalMs: config.memoryGcIntervalMs,
    // At rest a look every 32 s (by default): the looks themselves were most of the idle CPU.
    idleIntervalMs: config.memoryGcIntervalMs * MEMORY_IDLE_BACKOFF,
    growthBytes: config.memoryGcGrowthMiB * 1024 * 1024,
    ...("trimmer" in trimmer ? { trimmer: trimmer.trimmer } : {}),
    trimGrowthBytes: config.memoryTrimGrowthMiB * 1024 * 1024,
    onTrimmed: (freeBefore, freeAfter, ms) =>
      log.debug(
        { ms: Number(ms.toFixed(2)), mallocFreeMiB: [mib(freeBefore), mib(freeAfter)] },
        "memory keeper trimmed",
      ),
    onUnavailable: () =>
      log.warn("node runs without --expose-gc: the memory keeper is off (the process keeps more garbage)"),
    onCollected: (before, after, ms) =>
      log.debug(
        {
          ms: Math.round(ms),
          heapMiB: [mib(before.heapUsed), mib(after.heapUsed)],
          buffersMiB: [mib(before.arrayBuffers), mib(after.arrayBuffers)],
        },
        "memory keeper collected",
      ),
  });
  const kc = new PooledKubeConfig();
  kc.loadFromDefault();
  const operator = await startOperator({ kc, config, log, role });
  log.info(
    {
      role,
      namespace: config.clusterWide ? "(cluster-wide)" : config.namespace,
      redis: describeRedis(config),
    },
    "etcd operator running",
  );
  let stopping = false;
  // The HTTP server answers on for a while after SIGTERM (HTTP_SHUTDOWN_DELAY_MS): kube-proxy routes
  // new connections to a terminating pod until it has seen the pod go, and those would time out.
  const drainMs = role === "all" || role === "http" ? config.httpShutdownDelayMs : 0;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, drainMs }, "shutting down");
    setTimeout(() => {
      keeper.stop();
      operator.stop().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    }, drainMs);
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((error: unknown) => {
    process.stderr.write(
      `etcd operator failed to start: ${error instanceof Error ? error.stack : String(error)}\n`,
    );
    process.exit(1);
  });
}

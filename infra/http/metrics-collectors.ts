// Gauges computed when /metrics is scraped, from the objects themselves, so they are right in
// whichever process serves them: members per cluster (from each EtcdCluster's status), backup age,
// size, interval and verification (from each EtcdBackup), a restore's outcome (from each
// EtcdRestore's status), and queue depth and wait (from BullMQ). One scrape lists each kind once. A
// source that cannot be read drops its series and reports 0 in etcd_operator_scrape_source_up
// instead of failing the whole scrape.
import type { V1ObjectMeta } from "@kubernetes/client-node";
import type { Queue } from "bullmq";
import { Gauge, Registry } from "prom-client";
import type { EtcdBackup } from "../../shared/api/etcd-backup.ts";
import type { OperatorConfig } from "../../shared/config.ts";
import type { Kube } from "../../shared/kube.ts";
import type { Logger } from "../../shared/log.ts";
import { METRIC_PREFIX } from "../../shared/metrics.ts";
import { inScope } from "../../shared/scope.ts";

export interface WorldSources {
  kube: Kube;
  config: OperatorConfig;
  queues: Queue[];
  log: Logger;
}

/** The first call starts the read; calls within `ttlMs` share it (the gauges of one scrape). */
function shared<T>(ttlMs: number, read: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (!last || Date.now() - last.at > ttlMs) last = { at: Date.now(), value: read() };
    return last.value;
  };
}

const READ_TIMEOUT_MS = 3_000;
const JOB_STATES = ["wait", "prioritized", "active", "delayed", "failed", "completed"] as const;

/** The status's backup size, once the backup worker writes it (status.backupSize, bytes). */
function backupSize(backup: EtcdBackup): number | undefined {
  const status: Record<string, unknown> = { ...(backup.status ?? {}) };
  return typeof status.backupSize === "number" ? status.backupSize : undefined;
}

export function worldMetricsRegistry(sources: WorldSources): Registry {
  const registry = new Registry();
  const registers = [registry];
  const { kube, config, log } = sources;
  const namespace = config.clusterWide ? undefined : config.namespace;

  const sourceUp = new Gauge({
    name: `${METRIC_PREFIX}scrape_source_up`,
    help: "1 when the source (clusters, backups, restores, queue) could be read for this scrape, 0 when not.",
    labelNames: ["source"],
    registers,
  });
  const attempt = async <T>(source: string, read: () => Promise<T>): Promise<T | undefined> => {
    let timer: NodeJS.Timeout | undefined;
    try {
      // A scrape must answer even while Redis or the API server hangs.
      const value = await Promise.race([
        read(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`no answer within ${READ_TIMEOUT_MS} ms`)),
            READ_TIMEOUT_MS,
          );
        }),
      ]);
      sourceUp.set({ source }, 1);
      return value;
    } catch (error) {
      sourceUp.set({ source }, 0);
      log.warn({ err: error, source }, "metrics source could not be read");
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  };

  const clusters = shared(1_000, () =>
    attempt("clusters", async () => (await kube.listClusters(namespace)).filter((c) => inScope(c, config))),
  );
  const backups = shared(1_000, () =>
    attempt("backups", async () => (await kube.listBackups(namespace)).filter((b) => inScope(b, config))),
  );
  const restores = shared(1_000, () =>
    attempt("restores", async () => (await kube.listRestores(namespace)).filter((r) => inScope(r, config))),
  );

  /** Gauges of one kind of object, labelled with its namespace and name; no value, no series. */
  const objectGauges =
    <T extends { metadata?: V1ObjectMeta }>(label: string, list: () => Promise<T[] | undefined>) =>
    (name: string, help: string, value: (object: T) => number | undefined) =>
      new Gauge({
        name: `${METRIC_PREFIX}${name}`,
        help,
        labelNames: ["namespace", label],
        registers,
        async collect() {
          this.reset();
          for (const object of (await list()) ?? []) {
            const v = value(object);
            const labels = {
              namespace: object.metadata?.namespace ?? "",
              [label]: object.metadata?.name ?? "",
            };
            if (v !== undefined) this.set(labels, v);
          }
        },
      });
  const clusterGauge = objectGauges("cluster", clusters);
  const backupGauge = objectGauges("backup", backups);
  const restoreGauge = objectGauges("restore", restores);
  clusterGauge(
    "cluster_members",
    "Voting members of the cluster, as the operator last saw them (status.size).",
    (c) => c.status?.size,
  );
  clusterGauge(
    "cluster_ready_members",
    "Members that serve requests (status.readyMembers).",
    (c) => c.status?.readyMembers,
  );
  clusterGauge("cluster_desired_members", "Members asked for (spec.size).", (c) =>
    typeof c.spec?.size === "number" ? c.spec.size : undefined,
  );
  clusterGauge(
    "cluster_available",
    "1 when a majority of the voting members is healthy (condition Available).",
    (c) => {
      const available = c.status?.conditions?.find((x) => x.type === "Available");
      return available ? (available.status === "True" ? 1 : 0) : undefined;
    },
  );
  clusterGauge(
    "cluster_no_space",
    "1 while etcd refuses writes for its space quota (condition NoSpace True), else 0.",
    (c) => (c.status?.conditions?.find((x) => x.type === "NoSpace")?.status === "True" ? 1 : 0),
  );
  clusterGauge(
    "cluster_last_defragmentation_timestamp_seconds",
    "When the operator last defragmented a member of the cluster (status.lastDefragmentation, Unix time).",
    (c) => {
      const at = Date.parse(c.status?.lastDefragmentation?.finishedAt ?? "");
      return Number.isNaN(at) ? undefined : at / 1000;
    },
  );

  const lastSuccess = (b: EtcdBackup): number | undefined => {
    const at = b.status?.lastSuccessDate ? Date.parse(b.status.lastSuccessDate) : Number.NaN;
    return Number.isFinite(at) ? at : undefined;
  };
  backupGauge(
    "backup_last_success_timestamp_seconds",
    "When the last successful backup was taken (Unix time).",
    (b) => {
      const at = lastSuccess(b);
      return at === undefined ? undefined : at / 1000;
    },
  );
  backupGauge(
    "backup_age_seconds",
    "Seconds since the last successful backup (alert when it grows past the interval).",
    (b) => {
      const at = lastSuccess(b);
      return at === undefined ? undefined : Math.max(0, (Date.now() - at) / 1000);
    },
  );
  backupGauge("backup_size_bytes", "Size of the last successful backup (status.backupSize).", backupSize);
  backupGauge(
    "backup_succeeded",
    "1 when the last backup succeeded, 0 when it failed (status.succeeded).",
    (b) => (typeof b.status?.succeeded === "boolean" ? (b.status.succeeded ? 1 : 0) : undefined),
  );
  backupGauge(
    "backup_interval_seconds",
    "How often a periodic backup is taken (spec.backupPolicy.backupIntervalInSecond); one-shot backups have none.",
    (b) => {
      const interval = b.spec?.backupPolicy?.backupIntervalInSecond;
      return interval !== undefined && interval > 0 ? interval : undefined;
    },
  );
  backupGauge(
    "backup_verification_succeeded",
    "1 when the last verification of a backup passed, 0 when it failed (status.verification.succeeded).",
    (b) => (b.status?.verification ? Number(b.status.verification.succeeded) : undefined),
  );
  restoreGauge(
    "restore_succeeded",
    "1 when the restore completed, 0 when it failed (status.phase); no series while it runs.",
    (r) => (r.status?.phase === "Completed" ? 1 : r.status?.phase === "Failed" ? 0 : undefined),
  );

  const counts = shared(1_000, () =>
    Promise.all(
      sources.queues.map((queue) =>
        attempt(`queue:${queue.name}`, async () => ({
          queue,
          counts: await queue.getJobCounts(...JOB_STATES),
        })),
      ),
    ),
  );
  new Gauge({
    name: `${METRIC_PREFIX}queue_jobs`,
    help: "Jobs in the queue by state (wait and prioritized: due and not started yet; delayed: a step asked to look again later).",
    labelNames: ["queue", "state"],
    registers,
    async collect() {
      this.reset();
      for (const entry of await counts()) {
        if (!entry) continue;
        for (const state of JOB_STATES)
          this.set({ queue: entry.queue.name, state }, entry.counts[state] ?? 0);
      }
    },
  });
  new Gauge({
    name: `${METRIC_PREFIX}queue_oldest_new_job_wait_seconds`,
    help: "How long the oldest new job (never started) has been due without a worker taking it; 0 when none waits.",
    labelNames: ["queue"],
    registers,
    async collect() {
      this.reset();
      const now = Date.now();
      for (const queue of sources.queues) {
        const jobs = await attempt(`queue:${queue.name}`, () =>
          queue.getJobs(["wait", "prioritized"], 0, 199, true),
        );
        if (!jobs) continue;
        const waits = jobs
          .filter((job) => (job.attemptsStarted ?? 0) === 0)
          .map((job) => (now - (job.timestamp + (job.opts.delay ?? 0))) / 1000);
        this.set({ queue: queue.name }, Math.max(0, ...waits));
      }
    },
  });
  return registry;
}

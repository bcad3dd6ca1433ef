// Runs chaos mode (functions/chaos.ts) in the scheduler role: every CHAOS_INTERVAL_MS, one look at
// each opted-in cluster in scope. With several scheduler replicas, a per-cluster key in Redis
// (SET NX, expiring after one interval) lets only one of them look at a cluster per interval, so
// replicas never add up to more kills. Nothing runs at CHAOS_LEVEL=0 (the default).
import type { Redis } from "ioredis";
import { chaosStep } from "../functions/chaos.ts";
import { CHAOS_ANNOTATION } from "../shared/api/etcd-cluster.ts";
import type { OperatorConfig } from "../shared/config.ts";
import type { Kube } from "../shared/kube.ts";
import type { Logger } from "../shared/log.ts";
import { operatorMetrics } from "../shared/metrics.ts";
import { KEY_PREFIX } from "../shared/queue.ts";
import { inScope } from "../shared/scope.ts";

export interface ChaosRunner {
  stop(): void;
}

export function chaosKey(namespace: string, name: string): string {
  return `${KEY_PREFIX}:chaos:${namespace}/${name}`;
}

/** One pass over the opted-in clusters; returns the pods it deleted. */
export async function chaosPass(deps: {
  kube: Kube;
  redis: Redis;
  config: OperatorConfig;
  log: Logger;
  random?: () => number;
}): Promise<string[]> {
  const { kube, redis, config, log } = deps;
  const clusters = await kube.listClusters(config.clusterWide ? undefined : config.namespace);
  const killed: string[] = [];
  for (const cluster of clusters) {
    if (!inScope(cluster, config) || cluster.metadata?.annotations?.[CHAOS_ANNOTATION] !== "true") continue;
    const namespace = cluster.metadata?.namespace ?? "";
    const name = cluster.metadata?.name ?? "";
    // Slightly less than an interval, so the next pass of the same replica is not locked out by its own key.
    const claimed = await redis.set(
      chaosKey(namespace, name),
      "1",
      "PX",
      Math.max(500, config.chaosIntervalMs - 250),
      "NX",
    );
    if (claimed !== "OK") continue;
    try {
      const decision = await chaosStep(
        { namespace, name },
        { kube, log, level: config.chaosLevel, random: deps.random ?? Math.random },
      );
      if ("kill" in decision) {
        operatorMetrics().chaosKills.inc({ namespace, cluster: name });
        killed.push(`${namespace}/${decision.kill}`);
      } else {
        log.debug({ cluster: `${namespace}/${name}`, why: decision.skip }, "chaos: no kill");
      }
    } catch (error) {
      log.warn({ err: error, cluster: `${namespace}/${name}` }, "chaos step failed");
    }
  }
  return killed;
}

export function startChaos(deps: {
  kube: Kube;
  redis: Redis;
  config: OperatorConfig;
  log: Logger;
}): ChaosRunner {
  const { config } = deps;
  if (config.chaosLevel <= 0) return { stop: () => {} };
  const log = deps.log.child({ component: "chaos" });
  log.warn(
    { level: config.chaosLevel, everyMs: config.chaosIntervalMs, annotation: `${CHAOS_ANNOTATION}=true` },
    "chaos mode is ON: member pods of opted-in clusters will be deleted (test environments only)",
  );
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    chaosPass({ ...deps, log })
      .catch((error: unknown) => log.warn({ err: error }, "chaos pass failed"))
      .finally(() => {
        running = false;
      });
  }, config.chaosIntervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

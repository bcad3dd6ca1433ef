// Builds the HTTP server against a local cluster for inject() tests: real Kubernetes (TokenReview,
// SubjectAccessReview, the CRDs), real Redis and BullMQ queues; logs captured for inspection.
import type { KubeConfig } from "@kubernetes/client-node";
import { Queue } from "bullmq";
import type { FastifyInstance } from "fastify";
import { Redis } from "ioredis";
import { pino } from "pino";
import { type AccessReviewer, kubernetesAccessReviewer } from "../../infra/http/access.ts";
import { buildServer } from "../../infra/http/server.ts";
import type { LocalCluster } from "../../infra/local/control-plane.ts";
import { loadConfig, type OperatorConfig } from "../../shared/config.ts";
import { Kube } from "../../shared/kube.ts";
import { BACKUP_QUEUE, RECONCILE_QUEUE } from "../../shared/queue.ts";

export const STATIC_TOKEN = "local-static-token-0123456789abcdef";

export interface TestServer {
  app: FastifyInstance;
  config: OperatorConfig;
  redis: Redis;
  reconcileQueue: Queue;
  backupQueue: Queue;
  /** Every log line the server wrote. */
  logs: string[];
  close(): Promise<void>;
}

export async function testServer(
  cluster: Pick<LocalCluster, "redisUrl">,
  kc: KubeConfig,
  options: {
    env?: Record<string, string>;
    access?: AccessReviewer;
    redisUrl?: string;
    mode?: "full" | "probes";
  } = {},
): Promise<TestServer> {
  const config = loadConfig({
    MY_POD_NAMESPACE: "default",
    REDIS_URL: options.redisUrl ?? cluster.redisUrl ?? "",
    HTTP_STATIC_TOKEN: STATIC_TOKEN,
    HTTP_RATE_LIMIT_PER_MINUTE: "1000000",
    ...options.env,
  });
  const logs: string[] = [];
  const log = pino({ level: "debug" }, { write: (line: string) => logs.push(line) });
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1 });
  redis.on("error", () => undefined);
  const reconcileQueue = new Queue(RECONCILE_QUEUE, { connection: redis });
  const backupQueue = new Queue(BACKUP_QUEUE, { connection: redis });
  for (const queue of [reconcileQueue, backupQueue]) queue.on("error", () => undefined);
  const app = await buildServer({
    config,
    log,
    kc,
    kube: new Kube(kc),
    access: options.access ?? kubernetesAccessReviewer(kc, { staticToken: config.httpStaticToken }),
    redis,
    reconcileQueue,
    backupQueue,
    mode: options.mode,
  });
  return {
    app,
    config,
    redis,
    reconcileQueue,
    backupQueue,
    logs,
    async close() {
      await app.close();
      await reconcileQueue.close().catch(() => undefined);
      await backupQueue.close().catch(() => undefined);
      redis.disconnect();
    },
  };
}

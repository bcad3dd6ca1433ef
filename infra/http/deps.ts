// What the HTTP server works with. Everything is passed in, so tests build the server with
// `buildServer(deps)` against the real control plane and call it with `inject()`.
import type { KubeConfig } from "@kubernetes/client-node";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { OperatorConfig } from "../../shared/config.ts";
import type { Kube } from "../../shared/kube.ts";
import type { Logger } from "../../shared/log.ts";
import type { AccessReviewer } from "./access.ts";

export interface HttpDeps {
  config: OperatorConfig;
  log: Logger;
  kc: KubeConfig;
  kube: Kube;
  access: AccessReviewer;
  /** For dirty marks (requestReconcile) and the readiness ping. */
  redis: Redis;
  reconcileQueue: Queue;
  backupQueue: Queue;
  /**
   * What to serve: "full" (API, webhook, dashboard, health, metrics) or "probes" (health and metrics
   * only, for the watcher, worker and scheduler roles).
   */
  mode?: "full" | "probes";
}

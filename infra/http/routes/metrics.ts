// /metrics in the Prometheus text format: what this process recorded (shared/metrics.ts) and the
// gauges read from the world at scrape time (metrics-collectors.ts). Like kube-rbac-proxy, it asks
// for a token allowed to `get` the non-resource URL /metrics unless METRICS_REQUIRE_AUTH=false.
import type { FastifyInstance } from "fastify";
import { Registry } from "prom-client";
import { operatorMetrics } from "../../../shared/metrics.ts";
import type { AuthHooks } from "../auth.ts";
import type { HttpDeps } from "../deps.ts";
import { worldMetricsRegistry } from "../metrics-collectors.ts";
import { withErrors } from "../schemas.ts";

export function metricsRoute(
  app: FastifyInstance,
  deps: HttpDeps,
  auth: AuthHooks,
  options: { world: boolean },
): void {
  // The world's gauges come from the full server only: served by every worker too, each series
  // would be scraped once per process (and cost an API list each time).
  const registry = options.world
    ? Registry.merge([
        operatorMetrics().registry,
        worldMetricsRegistry({
          kube: deps.kube,
          config: deps.config,
          queues: [deps.reconcileQueue, deps.backupQueue],
          log: deps.log,
        }),
      ])
    : operatorMetrics().registry;
  const open = !deps.config.metricsRequireAuth;
  app.get(
    "/metrics",
    {
      config: open ? { auth: "none" } : {},
      schema: {
        summary: "Prometheus metrics",
        tags: ["metrics"],
        produces: ["text/plain"],
        ...(open ? { security: [] } : {}),
        response: withErrors({ 200: { type: "string", description: "Prometheus text format 0.0.4" } }),
      },
      preHandler: open ? [] : [auth.require(() => ({ verb: "get", path: "/metrics" }))],
    },
    async (_request, reply) => {
      const text = await registry.metrics();
      return reply.type(registry.contentType).send(text);
    },
  );
}

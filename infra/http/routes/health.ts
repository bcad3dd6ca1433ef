// Health for the kubelet's probes, without authentication. /livez says the process serves requests
// (nothing outside it is checked: a Redis outage must not get every replica restarted); /readyz says
// it can do its work now: Redis answers a PING and the Kubernetes API answers /version.
import { VersionApi } from "@kubernetes/client-node";
import type { FastifyInstance } from "fastify";
import type { HttpDeps } from "../deps.ts";
import { Health } from "../schemas.ts";

const CHECK_TIMEOUT_MS = 2_000;

async function within(what: string, work: Promise<unknown>): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<string>((resolve) => {
    timer = setTimeout(
      () => resolve(`${what} did not answer within ${CHECK_TIMEOUT_MS} ms`),
      CHECK_TIMEOUT_MS,
    );
  });
  const result = work.then(
    () => "ok",
    (error: unknown) =>
      `${what} failed: ${error instanceof Error ? error.message : String(error)}`.slice(0, 300),
  );
  try {
    return await Promise.race([result, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export function healthRoutes(app: FastifyInstance, deps: HttpDeps): void {
  const version = deps.kc.makeApiClient(VersionApi);
  const probe = { auth: "none" as const };

  app.get(
    "/livez",
    {
      config: probe,
      schema: { summary: "Liveness", tags: ["health"], security: [], response: { 200: Health } },
    },
    async () => ({ status: "ok", checks: { process: "ok" } }),
  );

  app.get(
    "/readyz",
    {
      config: probe,
      schema: {
        summary: "Readiness: Redis and the Kubernetes API answer",
        tags: ["health"],
        security: [],
        response: { 200: Health, 503: Health },
      },
    },
    async (_request, reply) => {
      const [redis, apiserver] = await Promise.all([
        within("Redis", deps.redis.ping()),
        within("the Kubernetes API", version.getCode()),
      ]);
      const ok = redis === "ok" && apiserver === "ok";
      if (!ok) deps.log.warn({ redis, apiserver }, "not ready");
      return reply.code(ok ? 200 : 503).send({ status: ok ? "ok" : "failing", checks: { redis, apiserver } });
    },
  );
}

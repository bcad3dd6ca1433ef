// The operator's HTTP server (fastify): manual triggers and state reads, the validating admission
// webhook, health, Prometheus metrics, the OpenAPI description and the queue dashboard.
//   buildServer(deps)   the app without listening, for inject() tests
//   startHttp(options)  builds its own connections, TLS and server and listens (infra/operator.ts)
// Every request passes, in order: the rate limit (per client address), authentication (401),
// schema validation (400), authorization (403), then the handler (404 for unknown objects).
import { Server as HttpsServer } from "node:https";
import rateLimit from "@fastify/rate-limit";
import { CoreV1Api, type KubeConfig } from "@kubernetes/client-node";
import { Queue } from "bullmq";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from "fastify";
import type { OperatorConfig } from "../../shared/config.ts";
import { Kube } from "../../shared/kube.ts";
import type { Logger } from "../../shared/log.ts";
import { operatorMetrics } from "../../shared/metrics.ts";
import { BACKUP_QUEUE, RECONCILE_QUEUE } from "../../shared/queue.ts";
import { floorRaiser } from "../../shared/read-floor.ts";
import { connectRedis, describeRedis } from "../../shared/redis-connection.ts";
import { watchRedis } from "../../shared/redis-health.ts";
import { type AccessReviewer, kubernetesAccessReviewer } from "./access.ts";
import { authHooks } from "./auth.ts";
import { DASHBOARD_PREFIX, dashboardAccess, dashboardRoutes, LOGIN_PATH } from "./dashboard.ts";
import type { HttpDeps } from "./deps.ts";
import { errorBody, HttpError, installErrorHandling, schemaErrorFormatter } from "./errors.ts";
import { backupRoutes } from "./routes/backups.ts";
import { clusterRoutes } from "./routes/clusters.ts";
import { healthRoutes } from "./routes/health.ts";
import { metricsRoute } from "./routes/metrics.ts";
import { webhookRoutes } from "./routes/webhook.ts";
import { type ServingTls, servingTls, watchCertificateFiles } from "./tls.ts";
import { DEFAULT_WEBHOOK_CONFIGURATION, keepCaBundle } from "./webhook-configuration.ts";

export const OPENAPI_PATH = "/openapi.json";
const PROBE_PATHS = new Set(["/livez", "/readyz"]);

/** The routes the server offers (the dashboard's own pages and assets aside); a test keeps this true. */
export const HTTP_ROUTES: readonly { method: string; path: string; auth: "token" | "none" }[] = [
  { method: "GET", path: "/livez", auth: "none" },
  { method: "GET", path: "/readyz", auth: "none" },
  { method: "GET", path: "/metrics", auth: "token" },
  { method: "GET", path: OPENAPI_PATH, auth: "token" },
  { method: "GET", path: "/v1/namespaces/:ns/etcdclusters/:name", auth: "token" },
  { method: "POST", path: "/v1/namespaces/:ns/etcdclusters/:name/reconcile", auth: "token" },
  { method: "GET", path: "/v1/namespaces/:ns/etcdbackups/:name", auth: "token" },
  { method: "POST", path: "/v1/namespaces/:ns/etcdbackups/:name/backup", auth: "token" },
  { method: "POST", path: "/validate/etcdclusters", auth: "none" },
  { method: "POST", path: "/validate/etcdbackups", auth: "none" },
  { method: "POST", path: "/validate/etcdrestores", auth: "none" },
  { method: "GET", path: LOGIN_PATH, auth: "none" },
  { method: "POST", path: LOGIN_PATH, auth: "none" },
  { method: "POST", path: "/logout", auth: "none" },
  { method: "GET", path: `${DASHBOARD_PREFIX}/`, auth: "token" },
];

export interface BuildOptions {
  /** Serve over TLS (the dashboard cookie is then marked Secure). */
  tls?: ServingTls;
}

/** Collects the routes' schemas into the document served at OPENAPI_PATH (registered before them). */
async function registerOpenApi(app: FastifyInstance): Promise<void> {
  const { default: swagger } = await import("@fastify/swagger");
  await app.register(swagger, {
    openapi: {
      info: {
        title: "etcd operator",
        version: "v1",
        description:
          "Manual triggers and state of EtcdClusters and EtcdBackups, the admission webhook, health and metrics. " +
          "Send a Kubernetes bearer token; permissions follow the cluster's RBAC (SubjectAccessReview).",
      },
      components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
      security: [{ bearer: [] }],
    },
  });
}

export async function buildServer(deps: HttpDeps, options: BuildOptions = {}): Promise<FastifyInstance> {
  const full = (deps.mode ?? "full") === "full";
  const log = deps.log;
  const app = Fastify({
    loggerInstance: log as FastifyBaseLogger,
    // Our own one-line log per request (below): fastify's would include URLs with query strings.
    logController: new LogController({ disableRequestLogging: true }),
    https: options.tls ? { cert: options.tls.cert, key: options.tls.key } : null,
    bodyLimit: 64 * 1024,
    // Object names may be 253 characters (the default limit is 100).
    routerOptions: { maxParamLength: 512 },
    requestTimeout: 30_000,
    ajv: {
      // Reject what the schema does not allow instead of quietly dropping or converting it.
      customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false, verbose: true },
    },
    schemaErrorFormatter,
  });
  installErrorHandling(app, log);

  const auth = authHooks({
    reviewer: deps.access,
    log,
    dashboardPrefix: DASHBOARD_PREFIX,
    loginPath: LOGIN_PATH,
    dashboardAccess: dashboardAccess(deps),
  });
  // preValidation: after the rate limit (onRequest), before schema validation.
  app.addHook("preValidation", auth.authenticate);
  const metrics = operatorMetrics();
  app.addHook("onSend", async (request, reply, payload) => {
    reply.header("x-content-type-options", "nosniff");
    if (!request.url.startsWith(`${DASHBOARD_PREFIX}/static/`)) reply.header("cache-control", "no-store");
    return payload;
  });
  app.addHook("onResponse", async (request, reply) => {
    const route = request.routeOptions.url ?? "unmatched";
    metrics.httpRequests.inc({ method: request.method, route, status: String(reply.statusCode) });
    const quiet =
      route === "/livez" || route === "/readyz" || route === "/metrics" || route.startsWith(DASHBOARD_PREFIX);
    const line = {
      method: request.method,
      route,
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime),
      user: request.identity?.username,
    };
    if (reply.statusCode >= 500) log.warn(line, "request failed");
    else if (quiet) log.debug(line, "request");
    else log.info(line, "request");
  });

  // The OpenAPI document is served in full mode only; the probes server of the watcher and the
  // workers does not load the generator.
  if (full) await registerOpenApi(app);
  // One budget per client address across all routes, checked before anything else runs (an app-wide
  // onRequest hook, so unknown paths and failed logins count too); probes are exempt.
  await app.register(rateLimit, {
    global: false,
    max: deps.config.httpRateLimitPerMinute,
    timeWindow: 60_000,
    allowList: (request) => PROBE_PATHS.has(request.url),
    errorResponseBuilder: (_request, context) =>
      new HttpError(
        429,
        "TooManyRequests",
        `too many requests: at most ${context.max} per minute from one address; try again in ${context.after}`,
      ),
  });
  app.addHook("onRequest", app.rateLimit());
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split("?")[0] ?? "";
    return reply.code(404).send(errorBody(404, `no route ${request.method} ${path.slice(0, 100)}`));
  });

  healthRoutes(app, deps);
  metricsRoute(app, deps, auth, { world: full });
  if (full) {
    clusterRoutes(app, deps, auth);
    backupRoutes(app, deps, auth);
    webhookRoutes(app, deps);
    await dashboardRoutes(app, deps, auth, deps.access, options.tls !== undefined);
    app.get(OPENAPI_PATH, { schema: { hide: true } }, async () => app.swagger());
  }
  await app.ready();
  return app;
}

export interface RunningHttp {
  app: FastifyInstance;
  /** e.g. https://127.0.0.1:8443 */
  url: string;
  port: number;
  tls?: ServingTls;
  close(): Promise<void>;
}

/** Builds the server with its own Redis connection and queues, and listens on the configured port. */
export async function startHttp(options: {
  kc: KubeConfig;
  config: OperatorConfig;
  log: Logger;
  mode?: "full" | "probes";
  /** Default: TokenReview/SubjectAccessReview through kc, plus the configured static token. */
  access?: AccessReviewer;
  /** Port instead of config.httpPort (the metrics-only listener of the other roles). */
  port?: number;
}): Promise<RunningHttp> {
  const { kc, config } = options;
  const log = options.log.child({ component: "http" });
  const mode = options.mode ?? "full";
  const tls =
    mode === "full"
      ? await servingTls(config, { core: kc.makeApiClient(CoreV1Api), namespace: config.namespace })
      : undefined;
  // Fail fast while Redis is down (503 after a retry) rather than let requests queue up.
  const redis = connectRedis(config, { maxRetriesPerRequest: 1 });
  const redisHealth = watchRedis(redis, "http", describeRedis(config), log);
  const reconcileQueue = new Queue(RECONCILE_QUEUE, { connection: redis });
  const backupQueue = new Queue(BACKUP_QUEUE, { connection: redis });
  for (const queue of [reconcileQueue, backupQueue]) queue.on("error", (error) => redisHealth.error(error));
  const access = options.access ?? kubernetesAccessReviewer(kc, { staticToken: config.httpStaticToken });
  const closers: (() => void | Promise<void>)[] = [];
  try {
    const app = await buildServer(
      {
        config,
        log,
        kc,
        kube: new Kube(kc, { onClusterVersion: floorRaiser(redis) }),
        access,
        redis,
        reconcileQueue,
        backupQueue,
        mode,
      },
      { tls },
    );
    closers.push(() => app.close());
    const port = options.port ?? config.httpPort;
    await app.listen({ port, host: config.httpHost });
    const address = app.server.address();
    const boundPort = typeof address === "object" && address ? address.port : port;
    const shownHost =
      config.httpHost === "0.0.0.0" || config.httpHost === "::" ? "127.0.0.1" : config.httpHost;
    const url = `${tls ? "https" : "http"}://${shownHost}:${boundPort}`;
    if (tls?.caCert) {
      const keeper = keepCaBundle({
        kc,
        name: config.webhookConfigurationName ?? DEFAULT_WEBHOOK_CONFIGURATION,
        caCert: tls.caCert,
        log,
      });
      closers.push(() => keeper.stop());
      await keeper.firstAttempt;
    }
    if (tls?.source === "files" && config.httpTlsCertFile && config.httpTlsKeyFile) {
      const watcher = watchCertificateFiles({
        certFile: config.httpTlsCertFile,
        keyFile: config.httpTlsKeyFile,
        apply: (renewed) => {
          if (app.server instanceof HttpsServer) {
            app.server.setSecureContext({ cert: renewed.cert, key: renewed.key });
            log.info("serving certificate reloaded");
          }
        },
        onError: (error) => log.warn({ err: error }, "serving certificate could not be reloaded"),
      });
      closers.push(() => watcher.stop());
    }
    log.info({ url, mode, tls: tls?.source ?? "off" }, "HTTP server listening");
    return {
      app,
      url,
      port: boundPort,
      tls,
      async close() {
        for (const close of closers.reverse()) await close();
        await reconcileQueue.close();
        await backupQueue.close();
        redis.disconnect();
      },
    };
  } catch (error) {
    for (const close of closers.reverse()) await Promise.resolve(close()).catch(() => undefined);
    await reconcileQueue.close().catch(() => undefined);
    await backupQueue.close().catch(() => undefined);
    redis.disconnect();
    throw new Error(
      `the HTTP server could not start on ${config.httpHost}:${options.port ?? config.httpPort}`,
      {
        cause: error,
      },
    );
  }
}

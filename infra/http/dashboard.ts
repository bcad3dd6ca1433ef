// The queue dashboard (Bull Board) under /dashboard, read-only: it shows each cluster's reconcile job
// (its steps come and go as delayed/active), failures with their reasons and retries, and the backup
// queue. A browser signs in on a small form with a Kubernetes token (or the static token); the
// token is kept in an HttpOnly, SameSite=Strict cookie that only the dashboard accepts (the API's
// POST routes take the Authorization header only, so the cookie cannot be used for cross-site
// requests). Visitors must be allowed to list EtcdClusters where the operator works.
import { Type } from "@sinclair/typebox";
import type { FastifyInstance, FastifyReply } from "fastify";
import type { AccessReviewer } from "./access.ts";
import { type AuthHooks, identify, isWellFormedToken, SESSION_COOKIE } from "./auth.ts";
import type { HttpDeps } from "./deps.ts";
import { HttpError } from "./errors.ts";

export const DASHBOARD_PREFIX = "/dashboard";
export const LOGIN_PATH = "/login";
const SESSION_SECONDS = 8 * 3600;

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Only paths on this server: an open redirect would send a signed-in visitor anywhere. */
function safeNext(next: unknown): string {
  return typeof next === "string" && next.startsWith(`${DASHBOARD_PREFIX}`) && !next.includes("//")
    ? next
    : `${DASHBOARD_PREFIX}/`;
}

function loginPage(next: string, problem?: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>etcd operator: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}
label,input,button{display:block;width:100%;margin:.5rem 0}input{padding:.5rem;font-family:monospace}
button{padding:.5rem}.problem{color:#a00}</style></head>
<body><h1>etcd operator queues</h1>
<p>Sign in with a Kubernetes bearer token (e.g. <code>kubectl create token &lt;service-account&gt;</code>)
allowed to list EtcdClusters, or the operator's static token.</p>
${problem ? `<p class="problem" role="alert">${escapeHtml(problem)}</p>` : ""}
<form method="post" action="${LOGIN_PATH}">
<input type="hidden" name="next" value="${escapeHtml(next)}">
<label for="token">Token</label><input id="token" name="token" type="password" autocomplete="off" required>
<button type="submit">Sign in</button></form></body></html>`;
}

const LoginForm = Type.Object(
  {
    token: Type.String({ minLength: 1, maxLength: 16_384, description: "a bearer token" }),
    next: Type.Optional(Type.String({ maxLength: 2048, description: "a dashboard path" })),
  },
  { additionalProperties: false },
);

function sessionCookie(value: string, maxAge: number, secure: boolean): string {
  return [
    `${SESSION_COOKIE}=${encodeURIComponent(value)}`,
    `Path=/`,
    `Max-Age=${maxAge}`,
    "HttpOnly",
    "SameSite=Strict",
    ...(secure ? ["Secure"] : []),
  ].join("; ");
}

export async function dashboardRoutes(
  app: FastifyInstance,
  deps: HttpDeps,
  auth: AuthHooks,
  reviewer: AccessReviewer,
  secure: boolean,
): Promise<void> {
  // Loaded here, not at the top: the health-and-metrics server of the watcher and the workers
  // imports this module for its paths and access rule, and has no use for the board (~8 MiB).
  const [{ createBullBoard }, { BullMQAdapter }, { FastifyAdapter }] = await Promise.all([
    import("@bull-board/api"),
    import("@bull-board/api/bullMQAdapter"),
    import("@bull-board/fastify"),
  ]);
  const board = new FastifyAdapter();
  createBullBoard({
    queues: [
      new BullMQAdapter(deps.reconcileQueue, {
        readOnlyMode: true,
        displayName: "reconcile",
        description:
          "One job per EtcdCluster (id namespace/name): each run is one step; delayed = look again later",
      }),
      new BullMQAdapter(deps.backupQueue, {
        readOnlyMode: true,
        displayName: "backup",
        description: "Backups and restores, one job per EtcdBackup/EtcdRestore at a time",
      }),
    ],
    // @bull-board/fastify 9.10.1 pins its own copy of @bull-board/api for its types; at run time the
    // adapter only wires the routes the root @bull-board/api (with its matching UI) hands it.
    serverAdapter: board as unknown as Parameters<typeof createBullBoard>[0]["serverAdapter"],
    options: { uiConfig: { boardTitle: "etcd operator" } },
  });
  board.setBasePath(DASHBOARD_PREFIX);
  await app.register(board.registerPlugin(), { prefix: DASHBOARD_PREFIX });

  // The form posts application/x-www-form-urlencoded; only the login route reads it.
  app.addContentTypeParser(
    "application/x-www-form-urlencoded",
    { parseAs: "string", bodyLimit: 20_000 },
    (_request, body, done) => {
      done(
        null,
        Object.fromEntries(new URLSearchParams(typeof body === "string" ? body : body.toString("utf8"))),
      );
    },
  );

  const page = (reply: FastifyReply, code: number, html: string) =>
    reply
      .code(code)
      .header("content-security-policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
      .header("cache-control", "no-store")
      .type("text/html; charset=utf-8")
      .send(html);

  app.get<{ Querystring: { next?: string } }>(
    LOGIN_PATH,
    {
      config: { auth: "none" },
      schema: {
        hide: true,
        querystring: Type.Object({ next: Type.Optional(Type.String({ maxLength: 2048 })) }),
      },
    },
    async (request, reply) => page(reply, 200, loginPage(safeNext(request.query.next))),
  );

  app.post<{ Body: { token: string; next?: string } }>(
    LOGIN_PATH,
    { config: { auth: "none" }, bodyLimit: 20_000, schema: { hide: true, body: LoginForm } },
    async (request, reply) => {
      const next = safeNext(request.body.next);
      const token = request.body.token.trim();
      const refuse = (message: string) => page(reply, 401, loginPage(next, message));
      if (!isWellFormedToken(token)) return refuse("That is not a bearer token.");
      const identity = await identify(reviewer, token);
      if (!identity) return refuse("The token is not valid (expired, revoked or unknown).");
      try {
        await auth.check(identity, dashboardAccess(deps));
      } catch (error) {
        if (error instanceof HttpError && error.statusCode === 403) {
          return page(reply, 403, loginPage(next, error.message));
        }
        throw error;
      }
      request.log.info({ user: identity.username }, "dashboard sign-in");
      return reply.header("set-cookie", sessionCookie(token, SESSION_SECONDS, secure)).redirect(next, 303);
    },
  );

  app.post("/logout", { config: { auth: "none" }, schema: { hide: true } }, async (_request, reply) =>
    reply.header("set-cookie", sessionCookie("", 0, secure)).redirect(LOGIN_PATH, 303),
  );
}

/** A dashboard visitor may list EtcdClusters in the watched namespace (all namespaces when cluster-wide). */
export function dashboardAccess(deps: Pick<HttpDeps, "config">) {
  return {
    verb: "list",
    group: "etcd.database.coreos.com",
    resource: "etcdclusters",
    ...(deps.config.clusterWide ? {} : { namespace: deps.config.namespace }),
  };
}

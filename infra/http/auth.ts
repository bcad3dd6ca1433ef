// Authentication and authorization as fastify hooks. Every route needs a bearer token unless it says
// otherwise in its config (`auth: "none"` for health probes and the admission webhook, which the API
// server calls without credentials); dashboard pages also accept the token from the login cookie.
// Order of answers: 401 (no or bad token) before 400 (bad input) before 403 (not allowed) before 404,
// so nothing about inputs or objects is revealed to callers who may not ask.
import type { FastifyReply, FastifyRequest, preHandlerAsyncHookHandler } from "fastify";
import type { Logger } from "../../shared/log.ts";
import { type Access, type AccessReviewer, describeAccess, type Identity } from "./access.ts";
import { forbidden, HttpError, unauthorized, unavailable } from "./errors.ts";

export type AuthMode = "bearer" | "none" | "cookie";

declare module "fastify" {
  interface FastifyRequest {
    identity?: Identity;
  }
  interface FastifyContextConfig {
    auth?: AuthMode;
  }
}

export const SESSION_COOKIE = "eop_session";
/** RFC 6750 b64token. */
const TOKEN_RE = /^[A-Za-z0-9\-._~+/]+=*$/;
const MAX_TOKEN_LENGTH = 16_384;

export function isWellFormedToken(token: string): boolean {
  return token.length > 0 && token.length <= MAX_TOKEN_LENGTH && TOKEN_RE.test(token);
}

export function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (header === undefined) return undefined;
  const match = /^Bearer +(\S+)\s*$/i.exec(header);
  if (!match?.[1] || !isWellFormedToken(match[1])) {
    throw unauthorized(
      'the Authorization header must be "Bearer <token>" with a token of base64url characters',
    );
  }
  return match[1];
}

export function cookieValue(request: FastifyRequest, name: string): string | undefined {
  const header = request.headers.cookie;
  if (typeof header !== "string") return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
    try {
      const value = decodeURIComponent(part.slice(eq + 1).trim());
      return isWellFormedToken(value) ? value : undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

export async function identify(reviewer: AccessReviewer, token: string): Promise<Identity | undefined> {
  try {
    return await reviewer.authenticate(token);
  } catch (error) {
    throw unavailable("cannot check the token now: the Kubernetes API did not answer the TokenReview", error);
  }
}

export interface AuthHooks {
  /** onRequest: sets request.identity or answers 401 (dashboard pages: redirect to the login form). */
  authenticate(request: FastifyRequest, reply: FastifyReply): Promise<unknown>;
  /** A preHandler that answers 403 unless the caller may do `access(request)`. */
  require(access: (request: FastifyRequest) => Access): preHandlerAsyncHookHandler;
  check(identity: Identity, access: Access): Promise<void>;
}

export function authHooks(options: {
  reviewer: AccessReviewer;
  log: Logger;
  dashboardPrefix: string;
  loginPath: string;
  /** What a dashboard visitor must be allowed (e.g. list etcdclusters in the watched namespace). */
  dashboardAccess: Access;
}): AuthHooks {
  const { reviewer, log } = options;

  const check = async (identity: Identity, access: Access): Promise<void> => {
    let decision: Awaited<ReturnType<AccessReviewer["authorize"]>>;
    try {
      decision = await reviewer.authorize(identity, access);
    } catch (error) {
      throw unavailable(
        "cannot check permissions now: the Kubernetes API did not answer the SubjectAccessReview",
        error,
      );
    }
    if (!decision.allowed) {
      log.info({ user: identity.username, access: describeAccess(access) }, "request forbidden");
      throw forbidden(
        `user ${JSON.stringify(identity.username)} may not ${describeAccess(access)}` +
          (decision.reason ? ` (${decision.reason})` : ""),
      );
    }
  };

  const onDashboard = (request: FastifyRequest) =>
    request.url === options.dashboardPrefix || request.url.startsWith(`${options.dashboardPrefix}/`);

  return {
    check,
    async authenticate(request, reply) {
      const dashboard = onDashboard(request);
      const mode: AuthMode = request.routeOptions.config?.auth ?? (dashboard ? "cookie" : "bearer");
      if (mode === "none") return;
      try {
        const token =
          bearerToken(request) ?? (mode === "cookie" ? cookieValue(request, SESSION_COOKIE) : undefined);
        if (token === undefined) throw unauthorized('no credentials: send "Authorization: Bearer <token>"');
        const identity = await identify(reviewer, token);
        if (!identity) throw unauthorized("the token is not valid (expired, revoked or unknown)");
        request.identity = identity;
        if (dashboard) await check(identity, options.dashboardAccess);
      } catch (error) {
        // A person opening a dashboard page without a session gets the login form, not JSON.
        const isPage = request.method === "GET" && !request.url.startsWith(`${options.dashboardPrefix}/api/`);
        if (dashboard && isPage && error instanceof HttpError && error.statusCode === 401) {
          return reply.redirect(`${options.loginPath}?next=${encodeURIComponent(request.url)}`, 303);
        }
        throw error;
      }
    },
    require(access) {
      return async (request) => {
        if (!request.identity) throw unauthorized('no credentials: send "Authorization: Bearer <token>"');
        await check(request.identity, access(request));
      };
    },
  };
}

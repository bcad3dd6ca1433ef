// Who is calling and what they may do, answered by Kubernetes itself: a bearer token is checked with
// the TokenReview API and a permission with the SubjectAccessReview API, so the HTTP API follows the
// cluster's own RBAC (the caller may reconcile a cluster if they may `update` it). Answers are cached
// briefly: a burst of requests costs one review, and a revoked token or role stops working within
// the cache time. A static token (compared in constant time) serves local use without Kubernetes
// credentials; its holder may do everything the API offers.
import { createHash, timingSafeEqual } from "node:crypto";
import { AuthenticationV1Api, AuthorizationV1Api, type KubeConfig } from "@kubernetes/client-node";

export interface Identity {
  username: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
  /** Authenticated by the static token: no Kubernetes identity to authorize. */
  staticToken?: boolean;
}

export interface ResourceAccess {
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
  /** Omitted: all namespaces. */
  namespace?: string;
  name?: string;
}

export interface NonResourceAccess {
  verb: string;
  path: string;
}

export type Access = ResourceAccess | NonResourceAccess;

export interface AccessDecision {
  allowed: boolean;
  /** The authorizer's explanation, when it gave one. */
  reason?: string;
}

export interface AccessReviewer {
  /** The caller's identity, or undefined when the token is not valid. Throws when Kubernetes cannot answer. */
  authenticate(token: string): Promise<Identity | undefined>;
  authorize(identity: Identity, access: Access): Promise<AccessDecision>;
}

export const STATIC_TOKEN_USER = "etcd-operator:static-token";

/** A small time-bounded cache; keys are hashes, never tokens. */
class TtlCache<T> {
  readonly #entries = new Map<string, { value: T; expires: number }>();
  readonly #ttlMs: number;
  readonly #max: number;

  constructor(ttlMs: number, max: number) {
    this.#ttlMs = ttlMs;
    this.#max = max;
  }

  get(key: string): T | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    if (entry.expires < Date.now()) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: string, value: T, ttlMs = this.#ttlMs): void {
    // Oldest first out: Map keeps insertion order.
    if (this.#entries.size >= this.#max) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#entries.delete(oldest);
    }
    this.#entries.set(key, { value, expires: Date.now() + ttlMs });
  }
}

const sha256 = (text: string): Buffer => createHash("sha256").update(text).digest();

/** Equal tokens, in time that does not depend on where they differ (hashing makes lengths equal). */
export function sameToken(given: string, expected: string): boolean {
  return timingSafeEqual(sha256(given), sha256(expected));
}

export interface KubernetesAccessOptions {
  staticToken?: string;
  /** How long an answer is reused. Default 10 s. */
  cacheTtlMs?: number;
  /** Default 5000 ms: a review that takes longer fails the request with 503 instead of hanging it. */
  timeoutMs?: number;
}

function withTimeout<T>(work: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${timeoutMs} ms`)), timeoutMs);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

function isResourceAccess(access: Access): access is ResourceAccess {
  return "resource" in access;
}

export function kubernetesAccessReviewer(
  kc: KubeConfig,
  options: KubernetesAccessOptions = {},
): AccessReviewer {
  const authentication = kc.makeApiClient(AuthenticationV1Api);
  const authorization = kc.makeApiClient(AuthorizationV1Api);
  const ttl = options.cacheTtlMs ?? 10_000;
  const timeoutMs = options.timeoutMs ?? 5_000;
  const identities = new TtlCache<Identity | null>(ttl, 10_000);
  const decisions = new TtlCache<AccessDecision>(ttl, 10_000);

  return {
    async authenticate(token) {
      if (options.staticToken !== undefined && sameToken(token, options.staticToken)) {
        return { username: STATIC_TOKEN_USER, groups: [], staticToken: true };
      }
      const key = sha256(token).toString("hex");
      const cached = identities.get(key);
      if (cached !== undefined) return cached ?? undefined;
      const review = await withTimeout(
        authentication.createTokenReview({
          body: { apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: { token } },
        }),
        timeoutMs,
        "TokenReview",
      );
      const user = review.status?.user;
      const identity: Identity | null =
        review.status?.authenticated === true && user?.username
          ? { username: user.username, uid: user.uid, groups: user.groups ?? [], extra: user.extra }
          : null;
      // A wrong token is remembered for less time: it may be a token that was just issued elsewhere.
      identities.set(key, identity, identity ? ttl : Math.min(ttl, 2_000));
      return identity ?? undefined;
    },

    async authorize(identity, access) {
      if (identity.staticToken) return { allowed: true };
      const key = sha256(JSON.stringify([identity.username, identity.uid, identity.groups, access])).toString(
        "hex",
      );
      const cached = decisions.get(key);
      if (cached) return cached;
      const review = await withTimeout(
        authorization.createSubjectAccessReview({
          body: {
            apiVersion: "authorization.k8s.io/v1",
            kind: "SubjectAccessReview",
            spec: {
              user: identity.username,
              uid: identity.uid,
              groups: identity.groups,
              extra: identity.extra,
              ...(isResourceAccess(access)
                ? { resourceAttributes: { ...access } }
                : { nonResourceAttributes: { verb: access.verb, path: access.path } }),
            },
          },
        }),
        timeoutMs,
        "SubjectAccessReview",
      );
      const decision: AccessDecision = {
        allowed: review.status?.allowed === true && review.status.denied !== true,
        reason: review.status?.reason || undefined,
      };
      decisions.set(key, decision);
      return decision;
    },
  };
}

/** "update etcdclusters.etcd.database.coreos.com "x" in namespace "y"", for messages. */
export function describeAccess(access: Access): string {
  if (!isResourceAccess(access)) return `${access.verb} ${access.path}`;
  const resource = `${access.resource}${access.subresource ? `/${access.subresource}` : ""}${access.group ? `.${access.group}` : ""}`;
  const name = access.name ? ` ${JSON.stringify(access.name)}` : "";
  const where = access.namespace ? ` in namespace ${JSON.stringify(access.namespace)}` : " in all namespaces";
  return `${access.verb} ${resource}${name}${where}`;
}

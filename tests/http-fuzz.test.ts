// Fuzz: thousands of random requests (paths, methods, headers, tokens, bodies of every shape and
// content type) against the real server and the real control plane. Each must get a 4xx answer:
// never a 5xx, never a hang, and the server keeps serving. Plus malformed HTTP over a real socket.
// The seed is printed; FUZZ_SEED=<n> replays a run, FUZZ_COUNT=<n> changes its size.
import { connect } from "node:net";
import type { InjectOptions } from "fastify";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor } from "../infra/local/kube-wait.ts";
import { createCaller } from "./helpers/http-callers.ts";
import { STATIC_TOKEN, testServer } from "./helpers/http-server.ts";
import { random } from "./helpers/random.ts";

const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 1_000_000_007);
const COUNT = Number(process.env.FUZZ_COUNT ?? 3000);

const cluster = await startLocalCluster({ name: "httpapi", kubelet: false });
t.teardown(() => cluster.stop());
const { kc } = clientsFor(cluster.kubeconfigPath);
await installCrds(kc);
const caller = await createCaller(kc, "default", { name: "fuzzer", verbs: ["get", "update"], metrics: true });
const server = await testServer(cluster, kc);
t.teardown(() => server.close());

const rand = random(SEED);
const int = (n: number) => Math.floor(rand() * n);
const pick = <T>(items: readonly T[]): T => items[int(items.length)] as T;
const chance = (p: number) => rand() < p;

const ALPHABETS = [
  "abcdefghijklmnopqrstuvwxyz0123456789-.",
  "ABCDEFGHIJKLMNOPQRSTUVWXYZ_~!$&'()*+,;=:@",
  "%00%2F%2e%2E..//\\\\?#[]",
  "ążßΩ漢字🙂\u200b\u0000\u0007\t",
];
function randomString(max = 40): string {
  // By code point: a lone surrogate half is not text any client could send.
  const alphabet = Array.from(pick(ALPHABETS) + pick(ALPHABETS));
  let out = "";
  const length = int(max + 1);
  for (let i = 0; i < length; i++) out += alphabet[int(alphabet.length)] ?? "x";
  return out;
}
/** A path segment that is never a Kubernetes name (so no route can take it as valid). */
function badName(): string {
  const base = chance(0.2) ? "a".repeat(254 + int(50)) : randomString(30);
  return encodeURIComponent(`${base}${pick(["A", "_", " ", "!", "Ω", "..", "*"])}`);
}

function randomJson(depth = 0): unknown {
  switch (int(depth > 2 ? 5 : 8)) {
    case 0:
      return null;
    case 1:
      return rand() * 1e6 - 5e5;
    case 2:
      return randomString(60);
    case 3:
      return chance(0.5);
    case 4:
      return int(2 ** 31);
    case 5:
      return Array.from({ length: int(5) }, () => randomJson(depth + 1));
    default: {
      const object: Record<string, unknown> = {};
      for (let i = 0; i < int(6); i++) object[randomString(12) || "k"] = randomJson(depth + 1);
      return object;
    }
  }
}

/** A body that is never valid for a trigger route: unknown field, wrong type, or not an object. */
function badTriggerBody(): unknown {
  switch (int(4)) {
    case 0:
      return { [`x${randomString(10)}`]: randomJson(), reason: "ok" };
    case 1:
      return { reason: pick([int(100), null, true, [], {}, "x".repeat(101 + int(500)), "\u0001"]) };
    case 2:
      return pick([[], 1, "text", true, [randomJson()]]);
    default:
      return { ...(randomJson(2) as object), unknownField: randomJson() };
  }
}

/** An AdmissionReview that is never well-formed (wrong version, kind, uid or shape). */
function badReview(): unknown {
  const review: Record<string, unknown> = {
    apiVersion: pick(["admission.k8s.io/v1beta1", randomString(20), 1, null]),
    kind: pick(["AdmissionReview", randomString(10)]),
    request: chance(0.7)
      ? {
          uid: pick(["", int(5), null, "u"]),
          operation: pick(["CREATE", "PATCH", randomString(5)]),
          object: randomJson(),
        }
      : randomJson(),
  };
  if (chance(0.2)) delete review.request;
  return chance(0.1) ? randomJson() : review;
}

const METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"] as const;
const CONTENT_TYPES = [
  "application/json",
  "application/json; charset=utf-8",
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/xml",
  "application/octet-stream",
  "",
  randomString(20),
];
const REAL_ROUTES = [
  "/v1/namespaces/default/etcdclusters/alpha",
  "/v1/namespaces/default/etcdclusters/alpha/reconcile",
  "/v1/namespaces/default/etcdbackups/nightly",
  "/v1/namespaces/default/etcdbackups/nightly/backup",
  "/metrics",
  "/openapi.json",
];

function randomAuthorization(): string | undefined {
  switch (int(7)) {
    case 0:
      return undefined;
    case 1:
      return `Bearer ${randomString(60)}`;
    case 2:
      return `Bearer ${Buffer.from(randomString(40)).toString("base64url")}`;
    case 3:
      return pick([
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer  ",
        `bearer ${STATIC_TOKEN} extra`,
        randomString(30),
      ]);
    case 4:
      return `Bearer ${STATIC_TOKEN.slice(0, int(STATIC_TOKEN.length))}`;
    case 5:
      return `Bearer ${caller.token.slice(0, -1 - int(5))}`;
    default:
      return `Bearer ${"A".repeat(17_000)}`;
  }
}

function asciiOnly(value: string): string {
  // Header values are bytes; Node refuses others before the server sees them, which tests nothing.
  return value.replace(/[^\t\x20-\x7e]/g, "?");
}

/** One random request that no valid caller would make; `valid` says which credentials it carries. */
function randomRequest(): InjectOptions {
  const headers: Record<string, string> = {};
  for (let i = 0; i < int(4); i++)
    headers[`x-${randomString(8).replace(/[^a-z0-9-]/g, "") || "h"}`] = asciiOnly(randomString(50));
  if (chance(0.3))
    headers.cookie = asciiOnly(`eop_session=${randomString(40)}; ${randomString(10)}=${randomString(10)}`);
  const contentType = asciiOnly(pick(CONTENT_TYPES));
  const encode = (body: unknown) =>
    typeof body === "string" && !contentType.includes("json") ? body : JSON.stringify(body);
  switch (int(6)) {
    case 0: {
      // Random paths and methods, random or no credentials.
      const auth = randomAuthorization();
      if (auth) headers.authorization = asciiOnly(auth);
      const path = `/${Array.from({ length: 1 + int(5) }, () => randomString(20)).join("/")}`;
      return { method: pick(METHODS), url: encodeURI(path).slice(0, 4000), headers };
    }
    case 1: {
      // Real routes with bad path parameters and a valid token.
      headers.authorization = `Bearer ${pick([STATIC_TOKEN, caller.token])}`;
      const kind = pick(["etcdclusters", "etcdbackups"]);
      const action = kind === "etcdclusters" ? pick(["", "/reconcile"]) : pick(["", "/backup"]);
      const [ns, name] = chance(0.5) ? [badName(), "alpha"] : ["default", badName()];
      return {
        method: action ? "POST" : "GET",
        url: `/v1/namespaces/${ns}/${kind}/${name}${action}`,
        headers,
      };
    }
    case 2: {
      // Trigger routes with bodies that are never valid, in any content type.
      headers.authorization = `Bearer ${pick([STATIC_TOKEN, caller.token])}`;
      if (contentType) headers["content-type"] = contentType;
      const url = pick(REAL_ROUTES.filter((r) => r.endsWith("reconcile") || r.endsWith("backup")));
      return { method: "POST", url, headers, payload: encode(badTriggerBody()) };
    }
    case 3: {
      // The webhook with malformed AdmissionReviews.
      headers["content-type"] = pick(["application/json", contentType || "application/json"]);
      const url = pick(["/validate/etcdclusters", "/validate/etcdbackups", "/validate/etcdrestores"]);
      return { method: "POST", url, headers, payload: encode(badReview()) };
    }
    case 4: {
      // Real routes with wrong or missing credentials, any method and body.
      const auth = randomAuthorization();
      if (auth) headers.authorization = asciiOnly(auth);
      if (contentType) headers["content-type"] = contentType;
      const method = pick(METHODS);
      const url = pick([
        ...REAL_ROUTES,
        "/dashboard/api/queues",
        `/dashboard/api/queues/${randomString(10)}/retry`,
      ]);
      const withBody = method !== "GET" && method !== "HEAD" && chance(0.7);
      return { method, url: encodeURI(url), headers, ...(withBody ? { payload: encode(randomJson()) } : {}) };
    }
    default: {
      // The login form with garbage (bad shape, unknown fields, or tokens Kubernetes rejects).
      headers["content-type"] = pick(["application/x-www-form-urlencoded", contentType || "text/plain"]);
      const form = new URLSearchParams();
      if (chance(0.8)) form.set("token", asciiOnly(pick([randomString(50), "", `${STATIC_TOKEN}x`])));
      if (chance(0.3)) form.set(randomString(8) || "z", randomString(20));
      if (chance(0.3)) form.set("next", randomString(80));
      return {
        method: "POST",
        url: "/login",
        headers,
        payload: chance(0.9) ? form.toString() : randomString(200),
      };
    }
  }
}

t.test(`${COUNT} random requests all get a 4xx answer (seed ${SEED})`, async (t) => {
  t.comment(`replay with FUZZ_SEED=${SEED} FUZZ_COUNT=${COUNT}`);
  const statuses = new Map<number, number>();
  const bad: string[] = [];
  const started = Date.now();
  for (let i = 0; i < COUNT; i++) {
    const request = randomRequest();
    let status: number;
    try {
      status = (await server.app.inject(request)).statusCode;
    } catch (error) {
      bad.push(`#${i} ${request.method} ${request.url}: inject threw ${String(error)}`);
      continue;
    }
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
    if (status < 400 || status >= 500) {
      bad.push(
        `#${i} ${request.method} ${String(request.url).slice(0, 120)} → ${status} ${JSON.stringify(request.payload ?? "").slice(0, 200)}`,
      );
    }
  }
  const summary = [...statuses.entries()]
    .sort(([a], [b]) => a - b)
    .map(([s, n]) => `${s}×${n}`)
    .join(" ");
  t.comment(`${COUNT} requests in ${Date.now() - started} ms: ${summary}`);
  t.same(bad.slice(0, 20), [], "every answer is a 4xx");
  t.ok((statuses.get(400) ?? 0) > COUNT / 10, "many reached validation (400), not only authentication");
  t.ok((statuses.get(401) ?? 0) > COUNT / 10, "many were refused as unauthenticated (401)");
  // Whether the random mix holds a valid token on an unknown path is luck of the seed; ask once for sure.
  const unknown = await server.app.inject({
    method: "GET",
    url: "/no/such/route",
    headers: { authorization: `Bearer ${STATIC_TOKEN}` },
  });
  t.equal(unknown.statusCode, 404, "an unknown path with a valid token is 404");
  const live = await server.app.inject({ method: "GET", url: "/livez" });
  t.equal(live.statusCode, 200, "the server still serves");
  t.notOk(
    server.logs.some((l) => l.includes('"level":50')),
    "nothing was logged as an error",
  );
});

t.test("malformed HTTP over a real socket gets 400 and the server keeps serving", async (t) => {
  await server.app.listen({ port: 0, host: "127.0.0.1" });
  const address = server.app.server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  const garbage = [
    "GARBAGE\r\n\r\n",
    "GET / HTTP/9.9\r\n\r\n",
    "GET /livez HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "POST /validate/etcdclusters HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nzzzzz",
    `GET /${"a".repeat(20_000)} HTTP/1.1\r\nHost: x\r\n${"X-Big: y\r\n".repeat(2000)}\r\n`,
    "\u0000\u0001\u0002\r\n\r\n",
  ];
  for (const raw of garbage) {
    const answer = await new Promise<string>((resolve) => {
      const socket = connect(port, "127.0.0.1", () => socket.end(raw));
      let data = "";
      socket.on("data", (chunk) => {
        data += chunk.toString("latin1");
      });
      socket.on("close", () => resolve(data));
      socket.on("error", () => resolve(data));
      socket.setTimeout(5_000, () => socket.destroy());
    });
    t.match(
      answer,
      /^HTTP\/1\.1 4\d\d /,
      `${JSON.stringify(raw.slice(0, 40))} → ${answer.split("\r\n")[0] ?? "(nothing)"}`,
    );
  }
  const live = await fetch(`http://127.0.0.1:${port}/livez`);
  t.equal(live.status, 200, "still serving");
});

// The HTTP API route by route with inject(), against the local control plane: real TokenReview and
// SubjectAccessReview for ServiceAccount tokens, the real CRDs and objects, real Redis and BullMQ.
// For each route: 401 without a token, 403 without permission, 400 with a clear message for each
// kind of bad input, 404 for unknown objects, 200/202 on the happy path.
import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { CustomObjectsApi, KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import type { FastifyInstance, InjectOptions } from "fastify";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { kubernetesAccessReviewer } from "../infra/http/access.ts";
import { HTTP_ROUTES, OPENAPI_PATH } from "../infra/http/server.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor } from "../infra/local/kube-wait.ts";
import { GROUP, VERSION } from "../shared/api/etcd-cluster.ts";
import { MERGE_PATCH } from "../shared/kube.ts";
import { backupJobId, reconcileJobId } from "../shared/queue.ts";
import { bearer, createCaller } from "./helpers/http-callers.ts";
import { STATIC_TOKEN, testServer } from "./helpers/http-server.ts";

const NS = "default";
const cluster = await startLocalCluster({ name: "httpapi", kubelet: false });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
await installCrds(kc);

const permitted = await createCaller(kc, NS, {
  name: "permitted",
  verbs: ["get", "list", "update"],
  metrics: true,
});
const reader = await createCaller(kc, NS, { name: "reader", verbs: ["get", "list"] });
const stranger = await createCaller(kc, NS, { name: "stranger" });

async function createObject(namespace: string, plural: string, body: object): Promise<void> {
  await custom.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, body });
}
const clusterObject = (name: string, namespace = NS, size = 3) => ({
  apiVersion: `${GROUP}/${VERSION}`,
  kind: "EtcdCluster",
  metadata: { name, namespace },
  spec: { size, version: "3.7.3" },
});
async function patchStatus(plural: string, name: string, status: object): Promise<void> {
  await custom.patchNamespacedCustomObjectStatus(
    { group: GROUP, version: VERSION, namespace: NS, plural, name, body: { status } },
    MERGE_PATCH,
  );
}
await createObject(NS, "etcdclusters", clusterObject("alpha"));
await patchStatus("etcdclusters", "alpha", {
  phase: "Running",
  size: 3,
  readyMembers: 2,
  currentVersion: "3.7.3",
});
await core.createNamespace({ body: { metadata: { name: "elsewhere" } } });
await createObject("elsewhere", "etcdclusters", clusterObject("beta", "elsewhere"));
const s3 = { storageType: "S3", s3: { path: "backups/alpha.db", awsSecret: "aws" } };
await createObject(NS, "etcdbackups", {
  apiVersion: `${GROUP}/${VERSION}`,
  kind: "EtcdBackup",
  metadata: { name: "nightly" },
  spec: s3,
});
await createObject(NS, "etcdbackups", {
  apiVersion: `${GROUP}/${VERSION}`,
  kind: "EtcdBackup",
  metadata: { name: "bad-container" },
  spec: { storageType: "ABS", abs: { path: "My_Container/alpha.db", absSecret: "azure" } },
});

// For the gauges: a periodic backup whose last verification failed, and restores done, failed and
// under way.
await createObject(NS, "etcdbackups", {
  apiVersion: `${GROUP}/${VERSION}`,
  kind: "EtcdBackup",
  metadata: { name: "hourly" },
  spec: { ...s3, backupPolicy: { backupIntervalInSecond: 3600 } },
});
await patchStatus("etcdbackups", "hourly", {
  succeeded: true,
  lastSuccessDate: new Date().toISOString(),
  verification: {
    succeeded: false,
    time: new Date().toISOString(),
    backupPath: "s3://backups/alpha.db",
    message: "the object's CRC-32 is not the one recorded",
  },
});
for (const [name, phase] of [
  ["restored", "Completed"],
  ["broken", "Failed"],
  ["underway", "Staging"],
] as const) {
  await createObject(NS, "etcdrestores", {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "EtcdRestore",
    metadata: { name },
    spec: { etcdCluster: { name }, backupStorageType: "S3", s3: s3.s3 },
  });
  await patchStatus("etcdrestores", name, { phase });
}

const server = await testServer(cluster, kc);
t.teardown(() => server.close());
const { app } = server;

async function call(options: InjectOptions, target: FastifyInstance = app) {
  const response = await target.inject(options);
  const json = () => JSON.parse(response.body) as Record<string, unknown>;
  return { status: response.statusCode, body: response.body, json, headers: response.headers };
}

const CLUSTER = `/v1/namespaces/${NS}/etcdclusters/alpha`;
const BACKUP = `/v1/namespaces/${NS}/etcdbackups/nightly`;
const example = (path: string) => path.replace(":ns", NS).replace(":name", "alpha");

t.test("health answers without a token: live, and ready while Redis and the API server answer", async (t) => {
  const live = await call({ method: "GET", url: "/livez" });
  t.equal(live.status, 200);
  t.same(live.json(), { status: "ok", checks: { process: "ok" } });
  const ready = await call({ method: "GET", url: "/readyz" });
  t.equal(ready.status, 200);
  t.same(ready.json(), { status: "ok", checks: { redis: "ok", apiserver: "ok" } });
});

t.test("readyz is 503 and says which dependency does not answer", async (t) => {
  // A port nothing listens on: taken from the OS, then released.
  const closedPort = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => resolve(typeof address === "object" && address ? address.port : 1));
    });
  });
  const deadKc = new KubeConfig();
  deadKc.loadFromOptions({
    clusters: [{ name: "dead", server: `https://127.0.0.1:${closedPort}`, skipTLSVerify: true }],
    users: [{ name: "u" }],
    contexts: [{ name: "dead", cluster: "dead", user: "u" }],
    currentContext: "dead",
  });
  const dead = await testServer(cluster, deadKc, { redisUrl: `redis://127.0.0.1:${closedPort}` });
  try {
    const ready = await call({ method: "GET", url: "/readyz" }, dead.app);
    t.equal(ready.status, 503);
    const checks = ready.json().checks as Record<string, string>;
    t.match(checks.redis, /^Redis (failed|did not answer)/);
    t.match(checks.apiserver, /^the Kubernetes API (failed|did not answer)/);
    t.equal(
      (await call({ method: "GET", url: "/livez" }, dead.app)).status,
      200,
      "still live: nothing to restart for",
    );
  } finally {
    await dead.close();
  }
});

t.test("every route but health, webhook and login asks for a token (401, JSON, no echo)", async (t) => {
  const guarded = HTTP_ROUTES.filter((r) => r.auth === "token" && !r.path.startsWith("/dashboard"));
  t.ok(guarded.length >= 6);
  for (const route of guarded) {
    const url = example(route.path);
    const method = route.method as "GET" | "POST";
    const none = await call({ method, url });
    t.equal(none.status, 401, `${route.method} ${route.path} without a token`);
    t.same(none.json(), {
      statusCode: 401,
      error: "Unauthorized",
      message: 'no credentials: send "Authorization: Bearer <token>"',
    });
    const basic = await call({ method, url, headers: { authorization: "Basic dXNlcjpwYXNz" } });
    t.equal(basic.status, 401);
    t.match(basic.json().message, /must be "Bearer <token>"/);
    const forged = "forged.token.value";
    const wrong = await call({ method, url, headers: bearer(forged) });
    t.equal(wrong.status, 401, `${route.method} ${route.path} with a token Kubernetes does not know`);
    t.match(wrong.json().message, /the token is not valid/);
    t.notMatch(wrong.body, forged, "the token is not echoed");
  }
  const page = await call({ method: "GET", url: "/dashboard/" });
  t.equal(page.status, 303, "a dashboard page without a session goes to the login form");
  t.equal(page.headers.location, "/login?next=%2Fdashboard%2F");
  t.equal(
    (await call({ method: "GET", url: "/dashboard/api/queues" })).status,
    401,
    "the dashboard's API is 401",
  );
});

t.test("403 when RBAC does not allow the caller, naming what was missing", async (t) => {
  const get = await call({ method: "GET", url: CLUSTER, headers: bearer(stranger.token) });
  t.equal(get.status, 403);
  t.match(
    get.json().message,
    `user "${stranger.username}" may not get etcdclusters.etcd.database.coreos.com "alpha" in namespace "default"`,
  );
  t.equal(
    (await call({ method: "GET", url: CLUSTER, headers: bearer(reader.token) })).status,
    200,
    "reader may get",
  );
  const reconcile = await call({
    method: "POST",
    url: `${CLUSTER}/reconcile`,
    headers: bearer(reader.token),
  });
  t.equal(reconcile.status, 403, "reader may not reconcile");
  t.match(reconcile.json().message, /may not update etcdclusters.etcd.database.coreos.com "alpha"/);
  const backup = await call({ method: "POST", url: `${BACKUP}/backup`, headers: bearer(reader.token) });
  t.equal(backup.status, 403, "reader may not take a backup");
  t.match(backup.json().message, /may not update etcdbackups.etcd.database.coreos.com "nightly"/);
  t.equal((await call({ method: "GET", url: BACKUP, headers: bearer(stranger.token) })).status, 403);
  const metrics = await call({ method: "GET", url: "/metrics", headers: bearer(reader.token) });
  t.equal(metrics.status, 403);
  t.match(metrics.json().message, /may not get \/metrics/);
  // Another namespace: the Role is in "default" only.
  const beta = await call({
    method: "GET",
    url: "/v1/namespaces/elsewhere/etcdclusters/beta",
    headers: bearer(permitted.token),
  });
  t.equal(beta.status, 403);
});

t.test("400 with a clear message for each kind of bad input", async (t) => {
  const auth = bearer(permitted.token);
  const long = "a".repeat(254);
  const cases: [string, InjectOptions, number, RegExp][] = [
    [
      "a namespace that is no name",
      { method: "GET", url: "/v1/namespaces/Default/etcdclusters/alpha" },
      400,
      /^path parameter "ns" "Default" is invalid: it must be a namespace name: 1 to 63 lower-case letters/,
    ],
    [
      "a namespace longer than 63",
      { method: "GET", url: `/v1/namespaces/${"n".repeat(64)}/etcdclusters/alpha` },
      400,
      /path parameter "ns" "n+\.\.\." \(64 characters\) is invalid/,
    ],
    [
      "an object name with a bad character",
      { method: "POST", url: "/v1/namespaces/default/etcdclusters/al_pha/reconcile" },
      400,
      /^path parameter "name" "al_pha" is invalid: it must be a Kubernetes object name/,
    ],
    [
      "an object name longer than 253",
      { method: "GET", url: `/v1/namespaces/default/etcdbackups/${long}` },
      400,
      /path parameter "name" "a+\.\.\." \(254 characters\) is invalid/,
    ],
    [
      "an unknown body field",
      { method: "POST", url: `${CLUSTER}/reconcile`, payload: { force: true } },
      400,
      /^the body has an unknown field "force"$/,
    ],
    [
      "a body field of the wrong type",
      { method: "POST", url: `${BACKUP}/backup`, payload: { reason: 42 } },
      400,
      /^body field "reason" must be of type string \(got 42\)$/,
    ],
    [
      "a body field too long",
      { method: "POST", url: `${CLUSTER}/reconcile`, payload: { reason: "x".repeat(101) } },
      400,
      /body field "reason" "x+\.\.\." \(101 characters\) is invalid: it must be a short note for the logs: at most 100 printable ASCII/,
    ],
    [
      "a body field with control characters",
      { method: "POST", url: `${CLUSTER}/reconcile`, payload: { reason: "bell\u0007" } },
      400,
      /body field "reason" "bell\\u0007" is invalid/,
    ],
    [
      "a body that is not an object",
      {
        method: "POST",
        url: `${CLUSTER}/reconcile`,
        payload: "[1,2]",
        headers: { "content-type": "application/json" },
      },
      400,
      /^the body must be a JSON object \(got \[1,2\]\)$/,
    ],
    [
      "a body that is not JSON",
      {
        method: "POST",
        url: `${CLUSTER}/reconcile`,
        payload: "{",
        headers: { "content-type": "application/json" },
      },
      400,
      /not valid JSON/,
    ],
    [
      "a text body where JSON is expected",
      {
        method: "POST",
        url: `${CLUSTER}/reconcile`,
        payload: "reason=x",
        headers: { "content-type": "text/plain" },
      },
      400,
      /^the body must be a JSON object \(got "reason=x"\)$/,
    ],
    [
      "a body of a type the server does not read",
      {
        method: "POST",
        url: `${CLUSTER}/reconcile`,
        payload: "<x/>",
        headers: { "content-type": "application/xml" },
      },
      415,
      /Unsupported Media Type/i,
    ],
    [
      "a body over the route's limit",
      { method: "POST", url: `${CLUSTER}/reconcile`, payload: { reason: "x".repeat(5000) } },
      413,
      /too large/i,
    ],
    [
      "an AdmissionReview without a request",
      {
        method: "POST",
        url: "/validate/etcdclusters",
        payload: { apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview" },
      },
      400,
      /^the body is missing the required field "request"$/,
    ],
    [
      "an AdmissionReview of another version",
      {
        method: "POST",
        url: "/validate/etcdbackups",
        payload: { apiVersion: "admission.k8s.io/v1beta1", kind: "AdmissionReview", request: {} },
      },
      400,
      /^body field "apiVersion" "admission.k8s.io\/v1beta1" is invalid: it must be "admission.k8s.io\/v1"$/,
    ],
  ];
  for (const [what, options, status, message] of cases) {
    const response = await call({ ...options, headers: { ...auth, ...options.headers } });
    t.equal(response.status, status, what);
    const body = response.json();
    t.equal(body.statusCode, status);
    t.match(body.message, message, `${what}: ${String(body.message)}`);
  }
});

t.test("404 for objects that do not exist or are not managed by this operator", async (t) => {
  const auth = bearer(permitted.token);
  const missing = await call({
    method: "GET",
    url: "/v1/namespaces/default/etcdclusters/nope",
    headers: auth,
  });
  t.equal(missing.status, 404);
  t.same(missing.json(), {
    statusCode: 404,
    error: "NotFound",
    message: "EtcdCluster default/nope not found",
  });
  const reconcile = await call({
    method: "POST",
    url: "/v1/namespaces/default/etcdclusters/nope/reconcile",
    headers: auth,
  });
  t.equal(reconcile.status, 404);
  t.equal(
    await server.reconcileQueue.getJobState(reconcileJobId(NS, "nope")),
    "unknown",
    "nothing was queued",
  );
  const backup = await call({
    method: "POST",
    url: "/v1/namespaces/default/etcdbackups/nope/backup",
    headers: auth,
  });
  t.equal(backup.status, 404);
  t.equal(backup.json().message, "EtcdBackup default/nope not found");
  // The static token may ask anything; the namespace is still not this operator's.
  const outside = await call({
    method: "GET",
    url: "/v1/namespaces/elsewhere/etcdclusters/beta",
    headers: bearer(STATIC_TOKEN),
  });
  t.equal(outside.status, 404);
  t.match(
    outside.json().message,
    /EtcdCluster elsewhere\/beta is not managed by this operator: this operator manages namespace "default" only/,
  );
  const route = await call({ method: "GET", url: "/v2/anything", headers: auth });
  t.equal(route.status, 404);
  t.equal(route.json().message, "no route GET /v2/anything");
});

t.test("200: a cluster's state has its spec, status, member pods and job", async (t) => {
  const state = await call({ method: "GET", url: CLUSTER, headers: bearer(permitted.token) });
  t.equal(state.status, 200);
  const body = state.json();
  t.match(body, {
    namespace: NS,
    name: "alpha",
    spec: { size: 3, version: "3.7.3" },
    status: { phase: "Running", size: 3, readyMembers: 2 },
    members: [],
    queue: { reconcile: { queue: "etcd-reconcile", jobId: "default/alpha", state: "none" } },
  });
});

t.test("202: a reconcile is queued once however often it is asked for", async (t) => {
  const auth = bearer(permitted.token);
  const first = await call({
    method: "POST",
    url: `${CLUSTER}/reconcile`,
    headers: auth,
    payload: { reason: "checking" },
  });
  t.equal(first.status, 202);
  t.same(first.json(), {
    accepted: true,
    jobId: "default/alpha",
    queued: true,
    message: "reconcile of EtcdCluster default/alpha requested on queue etcd-reconcile",
  });
  t.equal(await server.reconcileQueue.getJobState(reconcileJobId(NS, "alpha")), "waiting");
  const again = await call({ method: "POST", url: `${CLUSTER}/reconcile`, headers: auth });
  t.equal(again.status, 202, "no body is fine too");
  const counts = await server.reconcileQueue.getJobCounts("wait");
  t.equal(counts.wait, 1, "still one job for the cluster");
  const state = await call({ method: "GET", url: CLUSTER, headers: auth });
  t.match(state.json().queue, { reconcile: { state: "waiting", reason: "http", attemptsMade: 0 } });
  t.ok(
    server.logs.some(
      (l) => l.includes('"msg":"reconcile requested over HTTP"') && l.includes(permitted.username),
    ),
  );
});

t.test("202: a backup is queued once at a time; one that could never run is 422", async (t) => {
  const auth = bearer(permitted.token);
  const first = await call({ method: "POST", url: `${BACKUP}/backup`, headers: auth });
  t.equal(first.status, 202);
  t.match(first.json(), { accepted: true, jobId: "backup/default/nightly", queued: true });
  const second = await call({ method: "POST", url: `${BACKUP}/backup`, headers: auth });
  t.equal(second.status, 202);
  t.match(second.json(), { queued: false, message: /already waiting or running; no second one was added/ });
  const job = await server.backupQueue.getJob(backupJobId("backup", NS, "nightly"));
  t.same(job?.data, { namespace: NS, name: "nightly", reason: "manual" });
  const invalid = await call({
    method: "POST",
    url: "/v1/namespaces/default/etcdbackups/bad-container/backup",
    headers: auth,
  });
  t.equal(invalid.status, 422);
  t.match(
    invalid.json().message,
    /EtcdBackup default\/bad-container cannot be taken: spec.abs.path "My_Container\/alpha.db" starts with an invalid container name/,
  );
  const state = await call({ method: "GET", url: BACKUP, headers: auth });
  t.equal(state.status, 200);
  t.match(state.json(), {
    name: "nightly",
    spec: s3,
    queue: { backup: { state: "waiting", reason: "manual" } },
  });
});

t.test(
  "the webhook answers AdmissionReviews; accepted cluster changes are queued, dry runs are not",
  async (t) => {
    await createObject(NS, "etcdclusters", clusterObject("gamma"));
    const gamma = await custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: "etcdclusters",
      name: "gamma",
    });
    const review = (path: string, request: Record<string, unknown>) =>
      call({
        method: "POST",
        url: path,
        payload: { apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview", request },
      });
    const clusterRequest = (uid: string, size: number, extra: Record<string, unknown> = {}) => ({
      uid,
      kind: { group: GROUP, version: VERSION, kind: "EtcdCluster" },
      resource: { group: GROUP, version: VERSION, resource: "etcdclusters" },
      operation: "UPDATE",
      namespace: NS,
      name: "gamma",
      oldObject: gamma,
      object: { ...gamma, spec: { size, version: "3.7.3" } },
      userInfo: { username: "someone" },
      ...extra,
    });
    const shrink = await review("/validate/etcdclusters", clusterRequest("uid-1", 1));
    t.equal(shrink.status, 200);
    t.match(shrink.json(), {
      apiVersion: "admission.k8s.io/v1",
      kind: "AdmissionReview",
      response: {
        uid: "uid-1",
        allowed: false,
        status: { code: 422, reason: "Invalid", message: /would remove 2 of the cluster's 3 members/ },
      },
    });
    const dry = await review("/validate/etcdclusters", clusterRequest("uid-2", 5, { dryRun: true }));
    t.match(dry.json(), { response: { uid: "uid-2", allowed: true } });
    t.equal(
      await server.reconcileQueue.getJobState(reconcileJobId(NS, "gamma")),
      "unknown",
      "a dry run queues nothing",
    );
    const grow = await review("/validate/etcdclusters", clusterRequest("uid-3", 4));
    t.match(grow.json(), { response: { uid: "uid-3", allowed: true, warnings: [/spec.size 4 is even/] } });
    const job = await server.reconcileQueue.getJob(reconcileJobId(NS, "gamma"));
    t.equal(job?.data.reason, "admission", "an accepted change is reconciled at once");
    const misrouted = await review("/validate/etcdclusters", {
      ...clusterRequest("uid-4", 3),
      resource: { group: "", version: "v1", resource: "pods" },
    });
    t.match(misrouted.json(), {
      response: {
        allowed: false,
        status: { message: /reviews etcdclusters.etcd.database.coreos.com, not pods\./ },
      },
    });
    const abs = await review("/validate/etcdbackups", {
      uid: "uid-5",
      kind: { group: GROUP, version: VERSION, kind: "EtcdBackup" },
      resource: { group: GROUP, version: VERSION, resource: "etcdbackups" },
      operation: "CREATE",
      namespace: NS,
      object: { metadata: { name: "b" }, spec: { storageType: "GCS", gcs: { path: "b/x" } } },
    });
    t.match(abs.json(), {
      response: { uid: "uid-5", allowed: false, status: { message: /invalid bucket name "b"/ } },
    });
    const metrics = (await call({ method: "GET", url: "/metrics", headers: bearer(STATIC_TOKEN) })).body;
    t.match(
      metrics,
      /^etcd_operator_admission_reviews_total\{resource="etcdclusters",operation="UPDATE",allowed="false"\} 2$/m,
    );
  },
);

t.test("the static token is accepted (constant-time compare) and needs no RBAC", async (t) => {
  t.equal((await call({ method: "GET", url: CLUSTER, headers: bearer(STATIC_TOKEN) })).status, 200);
  const almost = `${STATIC_TOKEN.slice(0, -1)}X`;
  t.equal((await call({ method: "GET", url: CLUSTER, headers: bearer(almost) })).status, 401);
});

t.test(
  "metrics: members per cluster in scope, backups, restores, queue depth, requests; behind a token",
  async (t) => {
    const metrics = await call({ method: "GET", url: "/metrics", headers: bearer(permitted.token) });
    t.equal(metrics.status, 200);
    t.match(metrics.headers["content-type"], /^text\/plain/);
    const text = metrics.body;
    t.match(text, /^etcd_operator_cluster_members\{namespace="default",cluster="alpha"\} 3$/m);
    t.match(text, /^etcd_operator_cluster_ready_members\{namespace="default",cluster="alpha"\} 2$/m);
    t.match(text, /^etcd_operator_cluster_desired_members\{namespace="default",cluster="alpha"\} 3$/m);
    t.notMatch(text, /cluster="beta"/, "clusters outside the operator's scope are not reported");
    t.match(text, /^etcd_operator_queue_jobs\{queue="etcd-reconcile",state="wait"\} 1$/m);
    t.match(
      text,
      /^etcd_operator_queue_jobs\{queue="etcd-reconcile",state="delayed"\} 1$/m,
      "gamma, from the webhook",
    );
    t.match(text, /^etcd_operator_queue_jobs\{queue="etcd-backup",state="wait"\} 1$/m);
    t.match(text, /^etcd_operator_queue_oldest_new_job_wait_seconds\{queue="etcd-reconcile"\} \d/m);
    t.match(text, /^etcd_operator_scrape_source_up\{source="clusters"\} 1$/m);
    t.match(text, /^etcd_operator_backup_interval_seconds\{namespace="default",backup="hourly"\} 3600$/m);
    t.notMatch(
      text,
      /^etcd_operator_backup_interval_seconds\{[^}]*backup="nightly"/m,
      "none for a one-shot backup",
    );
    t.match(text, /^etcd_operator_backup_verification_succeeded\{namespace="default",backup="hourly"\} 0$/m);
    t.notMatch(
      text,
      /^etcd_operator_backup_verification_succeeded\{[^}]*backup="nightly"/m,
      "none before a verification",
    );
    t.match(text, /^etcd_operator_restore_succeeded\{namespace="default",restore="restored"\} 1$/m);
    t.match(text, /^etcd_operator_restore_succeeded\{namespace="default",restore="broken"\} 0$/m);
    t.notMatch(text, /restore="underway"/, "none while a restore runs");
    t.match(text, /^etcd_operator_scrape_source_up\{source="restores"\} 1$/m);
    t.match(
      text,
      /^etcd_operator_http_requests_total\{method="POST",route="\/v1\/namespaces\/:ns\/etcdclusters\/:name\/reconcile",status="202"\} 2$/m,
    );
    t.match(text, /^process_cpu_seconds_total /m, "process metrics too");
  },
);

t.test("the other roles' listener serves health and their own metrics only", async (t) => {
  const probes = await testServer(cluster, kc, { mode: "probes" });
  try {
    t.equal((await call({ method: "GET", url: "/livez" }, probes.app)).status, 200);
    t.equal((await call({ method: "GET", url: "/readyz" }, probes.app)).status, 200);
    t.equal((await call({ method: "GET", url: "/metrics" }, probes.app)).status, 401, "still behind a token");
    const metrics = await call(
      { method: "GET", url: "/metrics", headers: bearer(permitted.token) },
      probes.app,
    );
    t.equal(metrics.status, 200);
    t.match(metrics.body, /^etcd_operator_http_requests_total\{/m);
    t.notMatch(
      metrics.body,
      /etcd_operator_cluster_members/,
      "the world's gauges come from the full server only",
    );
    t.equal(
      (await call({ method: "GET", url: CLUSTER, headers: bearer(STATIC_TOKEN) }, probes.app)).status,
      404,
    );
    t.equal(
      (
        await call(
          { method: "POST", url: "/validate/etcdclusters", payload: {}, headers: bearer(STATIC_TOKEN) },
          probes.app,
        )
      ).status,
      404,
    );
  } finally {
    await probes.close();
  }
});

t.test("the OpenAPI description lists every API route with its schemas", async (t) => {
  t.equal((await call({ method: "GET", url: OPENAPI_PATH })).status, 401);
  const response = await call({ method: "GET", url: OPENAPI_PATH, headers: bearer(reader.token) });
  t.equal(response.status, 200);
  const doc = response.json() as { openapi: string; paths: Record<string, Record<string, unknown>> };
  t.match(doc.openapi, /^3\./);
  for (const route of HTTP_ROUTES.filter(
    (r) => !["/login", "/logout", OPENAPI_PATH].includes(r.path) && !r.path.startsWith("/dashboard"),
  )) {
    const path = route.path.replace(/:(\w+)/g, "{$1}");
    t.ok(doc.paths[path]?.[route.method.toLowerCase()], `${route.method} ${path} is described`);
  }
  t.match(doc.paths["/v1/namespaces/{ns}/etcdclusters/{name}/reconcile"], {
    post: { responses: { 202: {}, 400: {}, 401: {}, 403: {}, 404: {} } },
  });
});

t.test("HTTP_ROUTES is what the server serves", async (t) => {
  for (const route of HTTP_ROUTES) {
    t.ok(app.hasRoute({ method: route.method as "GET", url: route.path }), `${route.method} ${route.path}`);
  }
});

t.test("the rate limit answers 429 per client address, never on health probes", async (t) => {
  const limited = await testServer(cluster, kc, { env: { HTTP_RATE_LIMIT_PER_MINUTE: "3" } });
  try {
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++)
      statuses.push((await call({ method: "GET", url: "/v2/scan" }, limited.app)).status);
    t.same(statuses, [401, 401, 401, 429, 429], "unauthenticated and unknown paths count too");
    const refused = await call({ method: "GET", url: CLUSTER, headers: bearer(STATIC_TOKEN) }, limited.app);
    t.equal(refused.status, 429);
    t.match(
      refused.json().message,
      /^too many requests: at most 3 per minute from one address; try again in/,
    );
    const other = await call({ method: "GET", url: "/v2/scan", remoteAddress: "10.9.8.7" }, limited.app);
    t.equal(other.status, 401, "another address has its own budget");
    for (let i = 0; i < 10; i++)
      t.equal((await call({ method: "GET", url: "/livez" }, limited.app)).status, 200);
  } finally {
    await limited.close();
  }
});

t.test("a permission taken away stops working within the cache time", async (t) => {
  const shortLived = await createCaller(kc, NS, { name: "short-lived", verbs: ["get"] });
  const quick = await testServer(cluster, kc, {
    access: kubernetesAccessReviewer(kc, { staticToken: STATIC_TOKEN, cacheTtlMs: 500 }),
  });
  try {
    t.equal(
      (await call({ method: "GET", url: CLUSTER, headers: bearer(shortLived.token) }, quick.app)).status,
      200,
    );
    await kc
      .makeApiClient(RbacAuthorizationV1Api)
      .deleteNamespacedRoleBinding({ namespace: NS, name: "short-lived" });
    const started = Date.now();
    let status = 200;
    while (status === 200 && Date.now() - started < 10_000) {
      await sleep(100);
      status = (await call({ method: "GET", url: CLUSTER, headers: bearer(shortLived.token) }, quick.app))
        .status;
    }
    t.equal(status, 403);
    t.ok(Date.now() - started < 3_000, `refused ${Date.now() - started} ms after the RoleBinding went`);
  } finally {
    await quick.close();
  }
});

t.test("dashboard login: the form checks the token and permission, then sets a strict cookie", async (t) => {
  const form = await call({ method: "GET", url: "/login?next=/dashboard/queue/etcd-reconcile" });
  t.equal(form.status, 200);
  t.match(form.body, /<form method="post" action="\/login">/);
  t.match(form.body, /value="\/dashboard\/queue\/etcd-reconcile"/);
  const post = (token: string, next = "/dashboard/") =>
    call({
      method: "POST",
      url: "/login",
      payload: new URLSearchParams({ token, next }).toString(),
      headers: { "content-type": "application/x-www-form-urlencoded" },
    });
  const bad = await post("not-a-real-token");
  t.equal(bad.status, 401);
  t.match(bad.body, /The token is not valid/);
  const forbidden = await post(stranger.token);
  t.equal(forbidden.status, 403);
  t.match(
    forbidden.body,
    /may not list etcdclusters.etcd.database.coreos.com in namespace &#34;default&#34;/,
  );
  const offsite = await post(reader.token, "https://evil.example/");
  t.equal(offsite.headers.location, "/dashboard/", "no redirect off the dashboard");
  const ok = await post(reader.token, "/dashboard/queue/etcd-reconcile");
  t.equal(ok.status, 303);
  t.equal(ok.headers.location, "/dashboard/queue/etcd-reconcile");
  const cookie = String(ok.headers["set-cookie"]);
  t.match(cookie, /^eop_session=[^;]+; Path=\/; Max-Age=28800; HttpOnly; SameSite=Strict$/);
  const session = cookie.split(";")[0] ?? "";
  const page = await call({ method: "GET", url: "/dashboard/", headers: { cookie: session } });
  t.equal(page.status, 200);
  t.match(page.body, /<title>etcd operator<\/title>|bull/i);
  const api = await call({
    method: "GET",
    url: "/dashboard/api/queues?activeQueue=etcd-reconcile&status=waiting&page=1",
    headers: { cookie: session },
  });
  t.equal(api.status, 200);
  t.match(api.body, /default\/alpha/, "the dashboard's API shows the cluster's job");
  // The cookie works only for the dashboard: API routes take the Authorization header.
  t.equal((await call({ method: "GET", url: CLUSTER, headers: { cookie: session } })).status, 401);
  const out = await call({ method: "POST", url: "/logout" });
  t.match(String(out.headers["set-cookie"]), /^eop_session=; Path=\/; Max-Age=0;/);
});

t.test("no token appears in any log line or answer", async (t) => {
  const logs = server.logs.join("\n");
  t.ok(server.logs.length > 20, `${server.logs.length} log lines written`);
  for (const [who, token] of [
    ["permitted", permitted.token],
    ["reader", reader.token],
    ["stranger", stranger.token],
    ["static", STATIC_TOKEN],
  ]) {
    t.notOk(logs.includes(token ?? "-"), `${who}'s token is not logged`);
    t.notOk(logs.includes((token ?? "-").slice(-24)), `no part of ${who}'s token is logged`);
  }
  t.notMatch(logs, /authorization|cookie/i, "no request headers are logged");
});

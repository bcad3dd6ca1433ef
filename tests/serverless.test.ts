// serverless.yml is the single list of the operator's functions and their triggers; this test fails
// when it and the code disagree, in either direction: a listed handler, queue, job, schedule,
// config variable, role or route that is not real, or a job, schedule or route the code has that
// the list lacks. Each check is also run on a broken copy of the list, to prove it can fail.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fastifySwagger from "@fastify/swagger";
import { Queue } from "bullmq";
import Fastify from "fastify";
import { Redis } from "ioredis";
import t from "tap";
import { stopDaemon } from "../infra/local/daemons.ts";
import { startRedis } from "../infra/local/redis.ts";
import { loadConfig } from "../shared/config.ts";
import { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";
import { BACKUP_QUEUE, RECONCILE_QUEUE } from "../shared/queue.ts";
import { offlineKubeConfig } from "./helpers/offline-kube-config.ts";
import { acceptedRoles } from "./helpers/operator-roles.ts";
import {
  consumedQueues,
  type FunctionEntry,
  handlerProblems,
  httpProblems,
  httpRoutesOf,
  isConfigVariable,
  isScheduleField,
  liveJobs,
  operatorSources,
  parseServerless,
  queueProblems,
  ROOT,
  type Route,
  readServerless,
  scheduledJobs,
} from "./helpers/serverless-check.ts";

const entries = readServerless();
const sources = operatorSources();
const code = {
  consumed: consumedQueues(sources),
  live: liveJobs(sources),
  scheduled: scheduledJobs(sources),
};

/** A deep copy of the real list with one change made by `edit`. */
function broken(edit: (copy: FunctionEntry[]) => void): FunctionEntry[] {
  const copy = structuredClone(entries);
  edit(copy);
  return copy;
}

function entry(list: FunctionEntry[], name: string): FunctionEntry {
  const found = list.find((e) => e.name === name);
  if (!found) throw new Error(`serverless.yml has no function "${name}"`);
  return found;
}

t.test(
  "serverless.yml lists reconcile, the resync schedule, backup, restore and the HTTP routes",
  async (t) => {
    t.same(
      entries.map((e) => e.name),
      ["reconcile", "resync", "backup", "restore", "health", "metrics", "clusters", "backups", "admission"],
    );
    t.same(entry(entries, "reconcile").events, [
      { kind: "queue", queue: "etcd-reconcile", job: "reconcile" },
    ]);
    t.same(entry(entries, "backup").events, [
      { kind: "queue", queue: "etcd-backup", job: "backup" },
      {
        kind: "schedule",
        queue: "etcd-backup",
        job: "backup",
        every: "EtcdBackup.spec.backupPolicy.backupIntervalInSecond",
      },
    ]);
    t.same(entry(entries, "restore").events, [{ kind: "queue", queue: "etcd-backup", job: "restore" }]);
    t.ok(isScheduleField("EtcdBackup.spec.backupPolicy.backupIntervalInSecond"), "a per-backup interval");
    t.notOk(isScheduleField("EtcdBackup.spec.backupPolicy.intervalSeconds"), "a made-up field is not");
    t.notOk(isScheduleField("EtcdBackup.spec.storageType"), "nor a field that is no number");
    t.same(entry(entries, "resync").events, [
      { kind: "schedule", queue: "etcd-reconcile", job: "resync", every: "FULL_LOOK_INTERVAL_MS" },
      { kind: "queue", queue: "etcd-reconcile", job: "resync" },
    ]);
  },
);

t.test("a malformed serverless.yml is refused with the path of the bad entry", async (t) => {
  t.throws(() => parseServerless("functions:\n  f:\n    handler: a.b\n"), /functions\.f\.events/);
  t.throws(
    () => parseServerless("functions:\n  f:\n    handler: a.b\n    events:\n      - sqs: { arn: x }\n"),
    /unknown event kind "sqs"/,
  );
  t.throws(
    () => parseServerless("functions:\n  f:\n    handler: a.b\n    events:\n      - queue: { name: q }\n"),
    /functions\.f\.events\[0\]\.queue\.job/,
  );
});

t.test("every handler imports and is a function", async (t) => {
  t.same((await handlerProblems(entries)).problems, []);
  const broken_ = await handlerProblems(
    broken((copy) => {
      entry(copy, "reconcile").handler = "functions/reconcile.reconcileEverything";
      entry(copy, "resync").handler = "infra/no-such-module.resyncAll";
    }),
  );
  t.match(broken_.problems, [
    /exports no function "reconcileEverything"/,
    /no-such-module\.ts does not exist/,
  ]);
});

t.test("the scanner finds the queues, jobs and schedules the code has today", async (t) => {
  // If this fails, the code changed shape (e.g. a Worker built another way) and the scanner must
  // learn it; otherwise the checks below would compare the list with nothing.
  t.ok(code.consumed.has(RECONCILE_QUEUE), "infra/worker.ts consumes the reconcile queue");
  t.ok(code.live.has("reconcile"), "requestReconcile enqueues reconcile jobs");
  t.ok(code.live.has("resync"), "the worker handles resync jobs");
  t.ok(code.scheduled.has("resync"), "infra/scheduler.ts schedules resync");
  t.ok(isConfigVariable("RECONCILE_INTERVAL_MS"), "RECONCILE_INTERVAL_MS is a setting");
  t.notOk(isConfigVariable("RECONCILE_INTERVAL_SECONDS"), "a made-up variable is not");
});

t.test("every queue event and schedule matches a real queue, job, worker and setting", async (t) => {
  t.same(queueProblems(entries, code).problems, []);
});

t.test("the queue checks catch a wrong queue, job, setting or a missing entry", async (t) => {
  const { problems: wrong } = queueProblems(
    broken((copy) => {
      const [schedule, queue] = entry(copy, "resync").events;
      if (schedule?.kind !== "schedule" || queue?.kind !== "queue") throw new Error("unexpected events");
      schedule.every = "RESYNC_EVERY";
      queue.queue = "etcd-reconcile-typo";
      entry(copy, "reconcile").events = [{ kind: "queue", queue: "etcd-reconcile", job: "reconcile-all" }];
    }),
    code,
  );
  t.match(wrong, [
    /no job "reconcile-all"/,
    /every "RESYNC_EVERY" is not a setting/,
    /no queue "etcd-reconcile-typo"/,
    /job "resync" belongs to queue "etcd-reconcile"/,
    /the code runs job "reconcile" but no function lists it/,
    /job "reconcile-all" is listed but nothing in the code/,
  ]);
  const { problems: missing } = queueProblems(
    broken((copy) => copy.splice(copy.indexOf(entry(copy, "resync")), 1)),
    code,
  );
  t.match(missing, [/the code runs job "resync"/, /the code schedules job "resync"/]);
  // A queue no worker consumes (the backup queue, until its worker host exists) is reported.
  if (!code.consumed.has(BACKUP_QUEUE)) {
    const { problems: unconsumed } = queueProblems(
      broken((copy) => {
        entry(copy, "reconcile").events.push({ kind: "queue", queue: BACKUP_QUEUE, job: "backup" });
      }),
      code,
    );
    t.match(unconsumed, [new RegExp(`no worker host consumes queue "${BACKUP_QUEUE}"`)]);
  }
  // A job listed under another queue than the one shared/queue.ts declares it with.
  const { problems: misplaced } = queueProblems(
    broken((copy) => {
      entry(copy, "reconcile").events = [{ kind: "queue", queue: BACKUP_QUEUE, job: "reconcile" }];
    }),
    { ...code, consumed: new Set([...code.consumed, BACKUP_QUEUE]) },
  );
  t.match(misplaced, [/job "reconcile" belongs to queue "etcd-reconcile"/]);
});

t.test("every function's role is a role the operator runs", async (t) => {
  const roles = entries.map((e) => e.role).filter((r): r is string => r !== undefined);
  t.ok(roles.length > 0, "functions name the operator role that hosts them");
  const accepted = await acceptedRoles(roles);
  for (const fn of entries) {
    if (fn.role === undefined) continue;
    if (accepted.has(fn.role)) t.pass(`${fn.name}: --role ${fn.role}`);
    else t.fail(`${fn.name}: --role ${fn.role} is not a role of the operator`);
  }
});

t.test("HTTP routes are read from the server's OpenAPI document", async (t) => {
  // The discovery itself, on a small real fastify app with @fastify/swagger.
  const app = Fastify();
  await app.register(fastifySwagger, { openapi: { info: { title: "t", version: "1" } } });
  app.get("/livez", { schema: {} }, async () => ({ ok: true }));
  app.post("/v1/namespaces/:ns/etcdclusters/:name/reconcile", { schema: {} }, async () => ({}));
  await app.ready();
  t.teardown(() => app.close());
  const routes = httpRoutesOf(app);
  t.same(routes, [
    { method: "GET", path: "/livez" },
    { method: "POST", path: "/v1/namespaces/:ns/etcdclusters/:name/reconcile" },
  ]);
  const listed: FunctionEntry[] = [
    {
      name: "health",
      handler: "x.y",
      role: "http",
      events: [{ kind: "http", method: "GET", path: "/livez" }],
    },
    { name: "gone", handler: "x.y", role: "http", events: [{ kind: "http", method: "GET", path: "/gone" }] },
  ];
  t.match(httpProblems(listed, routes), [
    /gone: http GET \/gone is not a route/,
    /serves POST \/v1\/namespaces\/:ns\/etcdclusters\/:name\/reconcile but no function lists it/,
  ]);
});

const serverModule = join(ROOT, "infra/http/server.ts");

/** Builds the real HTTP server (as its own tests do, without listening) and reads its routes. */
async function realRoutes(): Promise<Route[]> {
  const dir = mkdtempSync(join(tmpdir(), "serverless-redis-"));
  const redis = await startRedis({ dir, logFile: join(dir, "redis.log"), pidFile: join(dir, "redis.pid") });
  const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
  const config = loadConfig({ REDIS_URL: redis.url });
  // Routes are registered without calling the API server; nothing listens on this address.
  const kc = offlineKubeConfig();
  const reconcileQueue = new Queue(RECONCILE_QUEUE, { connection });
  const backupQueue = new Queue(BACKUP_QUEUE, { connection });
  try {
    const server: Record<string, unknown> = await import(serverModule);
    const access: Record<string, unknown> = await import(join(ROOT, "infra/http/access.ts"));
    const build = server.buildServer;
    const reviewer = access.kubernetesAccessReviewer;
    if (typeof build !== "function" || typeof reviewer !== "function") {
      throw new Error(
        "infra/http/server.ts must export buildServer(deps) and access.ts kubernetesAccessReviewer(kc)",
      );
    }
    const deps = {
      config,
      log: silentLogger(),
      kc,
      kube: new Kube(kc),
      access: reviewer(kc),
      redis: connection,
      reconcileQueue,
      backupQueue,
    };
    const app: unknown = await build(deps);
    if (typeof app !== "object" || app === null || !("ready" in app) || typeof app.ready !== "function") {
      throw new Error("buildServer(deps) did not return a fastify instance");
    }
    await app.ready();
    const routes = httpRoutesOf(app);
    if ("close" in app && typeof app.close === "function") await app.close();
    return routes;
  } finally {
    await reconcileQueue.close();
    await backupQueue.close();
    connection.disconnect();
    await stopDaemon(redis.record);
    rmSync(dir, { recursive: true, force: true });
  }
}

t.test("every HTTP route of the server is listed, and every listed route is real", async (t) => {
  t.same(httpProblems(entries, await realRoutes()), []);
});

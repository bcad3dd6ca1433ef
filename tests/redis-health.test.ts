// Redis connections under failure, against real Redis servers and a real Sentinel group (no
// Kubernetes): what a process reports while its Redis is down and when it is back, and the
// per-cluster lease on the replicas before a step runs.
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { pino } from "pino";
import t from "tap";
import { freePort, readPidFile, stopDaemon } from "../infra/local/daemons.ts";
import { startRedis } from "../infra/local/redis.ts";
import { startSentinelGroup } from "../infra/local/redis-sentinel.ts";
import { loadConfig } from "../shared/config.ts";
import { acquireLease, leaseKey, UNREPLICATED_BACKOFF_MS } from "../shared/lease.ts";
import { operatorMetrics } from "../shared/metrics.ts";
import { createCertificateAuthority, issueCertificate } from "../shared/pki.ts";
import {
  connectRedis,
  leaseReplicas,
  REDIS_SOCKET_TIMEOUT_MS,
  RESTART_AFTER_END_MS,
} from "../shared/redis-connection.ts";
import { watchRedis } from "../shared/redis-health.ts";

const dir = mkdtempSync(join(tmpdir(), "eop-redis-health-"));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function capturingLogger(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split("\n")) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { log: pino({ level: "debug" }, sink), lines };
}

async function metricValue(name: string, connection: string): Promise<number | undefined> {
  const metric = await operatorMetrics().registry.getSingleMetric(name)?.get();
  return metric?.values.find((v) => v.labels.connection === connection)?.value;
}

t.test("an outage is one warning, reminders at most every 30 s, and one line when it is back", async (t) => {
  const serverDir = join(dir, "plain");
  const options = { dir: serverDir, logFile: join(dir, "plain.log"), pidFile: join(dir, "plain.pid") };
  const server = await startRedis(options);
  const { log, lines } = capturingLogger();
  const redis = new Redis(server.url, { maxRetriesPerRequest: null, retryStrategy: () => 100 });
  t.teardown(() => redis.disconnect());
  const health = watchRedis(redis, "test", "redis://127.0.0.1", log);
  await redis.ping();
  await sleep(50);
  t.equal(health.connected(), true, "connected");
  t.equal(await metricValue("etcd_operator_redis_connected", "test"), 1, "gauge 1 while connected");

  await stopDaemon(server.record, 0);
  // Five seconds of reconnect attempts every 100 ms: ~50 errors from ioredis.
  await sleep(5_000);
  t.equal(health.connected(), false, "not connected while Redis is down");
  t.equal(await metricValue("etcd_operator_redis_connected", "test"), 0, "gauge 0");
  t.equal(await metricValue("etcd_operator_redis_disconnects_total", "test"), 1, "one disconnect counted");
  const warnings = lines.filter((l) => l.level === 40);
  t.equal(
    warnings.length,
    1,
    `one warning for the whole outage so far (${warnings.map((w) => w.msg).join("; ")})`,
  );
  t.equal(warnings[0]?.msg, "Redis connection lost; steps wait until it is back");

  const restarted = await startRedis({ ...options, port: server.port });
  await redis.ping();
  await sleep(50);
  t.equal(health.connected(), true, "connected again");
  t.equal(await metricValue("etcd_operator_redis_connected", "test"), 1, "gauge 1 again");
  const back = lines.find((l) => l.msg === "Redis connection back");
  t.ok(
    typeof back?.downSeconds === "number" && back.downSeconds >= 4 && back.downSeconds < 30,
    `the line when it is back says for how long it was gone (${String(back?.downSeconds)} s)`,
  );
  await stopDaemon(restarted.record);
});

t.test(
  "a Redis that goes silent without a reset (its node lost) is reconnected to, not waited on",
  async (t) => {
    const serverDir = join(dir, "silent");
    const server = await startRedis({
      dir: serverDir,
      logFile: join(dir, "silent.log"),
      pidFile: join(dir, "silent.pid"),
    });
    t.teardown(() => stopDaemon(server.record));
    // A TCP relay in front of the real server: "silent" stops forwarding and never closes, as a
    // connection to a pod whose IP vanished with its node.
    const sockets: Socket[] = [];
    let silent = false;
    const relay = createServer((client) => {
      const upstream = connect(server.port, "127.0.0.1");
      sockets.push(client, upstream);
      client.on("data", (data) => {
        if (!silent) upstream.write(data);
      });
      upstream.on("data", (data) => {
        if (!silent) client.write(data);
      });
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
      client.on("close", () => upstream.destroy());
    });
    await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
    t.teardown(() => {
      for (const s of sockets) s.destroy();
      relay.close();
    });
    const address = relay.address();
    const port = typeof address === "object" && address ? address.port : 0;
    const { log, lines } = capturingLogger();
    const redis = connectRedis(loadConfig({ REDIS_URL: `redis://127.0.0.1:${port}` }), {
      maxRetriesPerRequest: null,
    });
    t.teardown(() => redis.disconnect());
    watchRedis(redis, "silent", "relay", log);
    t.equal(await redis.ping(), "PONG", "answers through the relay");
    const connections = sockets.length;

    silent = true;
    const started = Date.now();
    const stuck = redis.ping();
    await sleep(1_000);
    // The old connection's relay stays silent; new connections are relayed again.
    const staleSockets = sockets.length;
    silent = false;
    for (const s of sockets.slice(0, staleSockets)) {
      s.removeAllListeners("data");
    }
    const answered = await stuck.then(
      (reply) => `answered ${reply}`,
      (error: unknown) => `rejected: ${String(error)}`,
    );
    const waited = Date.now() - started;
    t.ok(
      waited >= REDIS_SOCKET_TIMEOUT_MS - 1_000 && waited < REDIS_SOCKET_TIMEOUT_MS + 10_000,
      `the command on the silent connection ended after ${waited} ms (${answered}), not TCP's minutes`,
    );
    t.equal(await redis.ping(), "PONG", "the next command goes over a new connection");
    t.ok(sockets.length > connections, "a new connection was made");
    t.ok(
      lines.some((l) => l.msg === "Redis connection lost; steps wait until it is back"),
      "and the lost connection was reported",
    );
  },
);

t.test(
  "a client that ended without being closed connects again; one closed on purpose stays closed",
  async (t) => {
    // ioredis ends a client for good when a connect fails in its connector (with Sentinel: a failover
    // noticed while it asks the sentinels). Here the same end comes from a retry strategy that gives
    // up while nothing listens on the port.
    const port = await freePort();
    const config = loadConfig({ REDIS_URL: `redis://127.0.0.1:${port}` });
    const client = connectRedis(config, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => {});
    const closed = connectRedis(config, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    closed.on("error", () => {});
    const copy = client.duplicate();
    copy.on("error", () => {});
    t.teardown(() => {
      client.disconnect();
      closed.disconnect();
      copy.disconnect();
    });
    const ended = (c: Redis) =>
      new Promise<void>((resolve) => (c.status === "end" ? resolve() : c.once("end", () => resolve())));
    await Promise.all([ended(client), ended(copy)]);
    t.pass("the clients ended: nothing answers and their retry strategy gave up");
    closed.disconnect();
    const serverDir = join(dir, "late");
    const server = await startRedis({
      dir: serverDir,
      logFile: join(dir, "late.log"),
      pidFile: join(dir, "late.pid"),
      port,
    });
    t.teardown(() => stopDaemon(server.record, 0));
    const ready = async (c: Redis) => {
      const deadline = Date.now() + 10_000;
      while (c.status !== "ready" && Date.now() < deadline) await sleep(100);
      return c.status;
    };
    t.equal(
      await ready(client),
      "ready",
      `connected again once Redis answered (within ${RESTART_AFTER_END_MS} ms of each end)`,
    );
    t.equal(await client.ping(), "PONG", "and its commands are answered");
    t.equal(await ready(copy), "ready", "so is a duplicate of it (BullMQ's blocking connections)");
    await sleep(2 * RESTART_AFTER_END_MS);
    t.equal(closed.status, "end", "a client closed on purpose stays closed");
  },
);

t.test("on a Sentinel group, a new lease is on a replica before the step runs", async (t) => {
  const group = await startSentinelGroup({ dir: join(dir, "sentinel") });
  t.teardown(() => group.stop());
  const config = loadConfig({ REDIS_SENTINELS: group.sentinelsEnv, REDIS_SENTINEL_MASTER: group.masterName });
  const redis = connectRedis(config, { maxRetriesPerRequest: null });
  // ioredis reports each failed reconnect during the failover as an error event.
  redis.on("error", () => {});
  t.teardown(() => redis.disconnect());
  const acquired = await acquireLease(
    redis,
    "ns/replicated",
    10_000,
    {},
    { replicas: leaseReplicas(config) },
  );
  t.ok("lease" in acquired && acquired.replicated, "taken, and a replica acknowledged it");
  const primary = await group.primaryPort();
  const replicas = group.servers.filter((s) => s.port !== primary);
  for (const replica of replicas) {
    const client = new Redis({ port: replica.port, host: "127.0.0.1", maxRetriesPerRequest: 0 });
    t.equal(await client.exists(leaseKey("ns/replicated")), 1, `replica ${replica.name} holds the lease`);
    client.disconnect();
  }

  // The primary lost: the promoted replica still knows who holds the cluster.
  const killed = await group.killPrimary();
  await group.awaitFailover(killed);
  const second = await acquireLease(redis, "ns/replicated", 10_000, {}, { replicas: 1 });
  t.ok("heldForMs" in second, "after the failover a second worker is told the cluster is held");
  if ("lease" in acquired) {
    await acquired.lease.guard();
    t.pass("and the first holder's guard still passes on the new primary");
    await acquired.lease.release();
  }

  // No replica: the lease is taken all the same (steps go on), reported as not replicated.
  const lone = await startRedis({
    dir: join(dir, "lone"),
    logFile: join(dir, "lone.log"),
    pidFile: join(dir, "lone.pid"),
  });
  const plain = new Redis(lone.url, { maxRetriesPerRequest: null });
  const started = Date.now();
  const unreplicated = await acquireLease(plain, "ns/lone", 10_000, {}, { replicas: 1 });
  t.ok("lease" in unreplicated && !unreplicated.replicated, "taken without a replica, and reported so");
  t.ok(Date.now() - started < 2_000, "after waiting at most half a second for one");
  const waits = async () =>
    Number(/cmdstat_wait:calls=(\d+)/.exec(await plain.info("commandstats"))?.[1] ?? 0);
  t.equal(await waits(), 1, "one WAIT so far");
  // WAIT blocks the connection: with no replica answering, the next leases do not wait again at once.
  for (const n of [1, 2, 3]) {
    const next = await acquireLease(plain, `ns/lone-${n}`, 10_000, {}, { replicas: 1 });
    t.ok("lease" in next && !next.replicated, `lease ${n} taken, reported as not replicated`);
  }
  t.equal(
    await waits(),
    1,
    `no WAIT for the leases taken within ${UNREPLICATED_BACKOFF_MS / 1000} s of the unanswered one`,
  );
  plain.disconnect();
  await stopDaemon(lone.record);
});

t.test("a sentinel that takes the connection and never answers is passed over", async (t) => {
  const groupDir = join(dir, "hung");
  const group = await startSentinelGroup({ dir: groupDir });
  t.teardown(() => group.stop());
  // Stopped, the first sentinel's port still completes TCP handshakes (the kernel's backlog) and
  // answers nothing: what a connect meets at an address that leads somewhere dead.
  const hung = readPidFile(join(groupDir, "sentinel-0.pid"));
  if (!hung) throw new Error("no pid file for sentinel-0");
  process.kill(hung.pid, "SIGSTOP");
  try {
    const config = loadConfig({
      REDIS_SENTINELS: group.sentinelsEnv,
      REDIS_SENTINEL_MASTER: group.masterName,
    });
    t.equal(
      config.redisSentinel?.sentinels[0]?.port,
      group.sentinels[0]?.port,
      "the stopped sentinel is asked first",
    );
    const redis = connectRedis(config, { maxRetriesPerRequest: null });
    redis.on("error", () => {});
    t.teardown(() => redis.disconnect());
    const started = Date.now();
    const answer = await Promise.race([redis.ping(), sleep(30_000).then(() => "no answer in 30 s")]);
    t.equal(answer, "PONG", `the next sentinel named the primary (PONG after ${Date.now() - started} ms)`);
  } finally {
    process.kill(hung.pid, "SIGCONT");
  }
});

t.test("TLS and passwords: the operator's connection finds the primary through the sentinels", async (t) => {
  const tlsDir = join(dir, "tls");
  mkdirSync(tlsDir);
  const ca = await createCertificateAuthority("redis test CA");
  const leaf = await issueCertificate(ca, {
    commonName: "redis",
    ipAddresses: ["127.0.0.1"],
    usage: ["server", "client"],
  });
  const files = {
    certFile: join(tlsDir, "tls.crt"),
    keyFile: join(tlsDir, "tls.key"),
    caFile: join(tlsDir, "ca.crt"),
  };
  writeFileSync(files.certFile, leaf.cert);
  writeFileSync(files.keyFile, leaf.key);
  writeFileSync(files.caFile, ca.cert);
  const password = randomBytes(12).toString("hex");
  const sentinelPassword = randomBytes(12).toString("hex");
  const group = await startSentinelGroup({
    dir: join(dir, "sentinel-tls"),
    tls: files,
    password,
    sentinelPassword,
  });
  t.teardown(() => group.stop());
  const env = {
    REDIS_SENTINELS: group.sentinelsEnv,
    REDIS_SENTINEL_MASTER: group.masterName,
    REDIS_SENTINEL_TLS: "true",
    REDIS_TLS_CA_FILE: files.caFile,
    REDIS_PASSWORD: password,
    REDIS_SENTINEL_PASSWORD: sentinelPassword,
  };
  const redis = connectRedis(loadConfig(env), { maxRetriesPerRequest: null });
  redis.on("error", () => {});
  t.teardown(() => redis.disconnect());
  await redis.set("eop:tls-check", "1");
  t.equal(await redis.get("eop:tls-check"), "1", "a write and a read over TLS, with both passwords");
  const acquired = await acquireLease(redis, "ns/tls", 10_000, {}, { replicas: 1 });
  t.ok("lease" in acquired && acquired.replicated, "a lease replicated over TLS");

  // The same group refuses a client without TLS, and one with a wrong password.
  const refused = async (extra: Record<string, string>) => {
    const client = connectRedis(loadConfig({ ...env, ...extra }), {
      maxRetriesPerRequest: 0,
      connectTimeout: 2_000,
      sentinelRetryStrategy: () => null,
      retryStrategy: () => null,
    });
    client.on("error", () => {});
    try {
      await client.get("eop:tls-check");
      return false;
    } catch {
      return true;
    } finally {
      client.disconnect();
    }
  };
  t.ok(await refused({ REDIS_SENTINEL_TLS: "false" }), "refused without TLS");
  t.ok(await refused({ REDIS_PASSWORD: "wrong" }), "refused with a wrong Redis password");
  t.ok(await refused({ REDIS_SENTINEL_PASSWORD: "wrong" }), "refused with a wrong sentinel password");

  const killed = await group.killPrimary();
  const promoted = await group.awaitFailover(killed);
  await redis.set("eop:tls-check", "2");
  t.equal(await redis.get("eop:tls-check"), "2", `the same connection writes on the promoted :${promoted}`);
});

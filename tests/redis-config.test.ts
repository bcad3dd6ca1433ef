// The Redis settings: a URL or a Sentinel group, the options ioredis gets for each, and the
// mistakes loadConfig refuses before anything starts.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import { ConfigError, loadConfig } from "../shared/config.ts";
import { IDLE_POLL_SECONDS } from "../shared/queue.ts";
import {
  describeRedis,
  leaseReplicas,
  parseSentinelAddresses,
  REDIS_SOCKET_TIMEOUT_MS,
  redisClientOptions,
  SENTINEL_COMMAND_TIMEOUT_MS,
} from "../shared/redis-connection.ts";

t.test("a URL by default, no lease replication", async (t) => {
  const config = loadConfig({});
  t.equal(config.redisUrl, "redis://127.0.0.1:6379");
  t.equal(config.redisSentinel, undefined);
  t.equal(leaseReplicas(config), 0);
  t.same(redisClientOptions(config, { maxRetriesPerRequest: null }), {
    maxRetriesPerRequest: null,
    socketTimeout: REDIS_SOCKET_TIMEOUT_MS,
  });
  t.ok(
    REDIS_SOCKET_TIMEOUT_MS >= 2 * IDLE_POLL_SECONDS * 1000,
    "a silent connection outlasts BullMQ's longest blocking wait before it is taken for dead",
  );
});

t.test("REDIS_PASSWORD goes to ioredis and never into descriptions", async (t) => {
  const config = loadConfig({ REDIS_URL: "redis://user:in-url@redis:6379/2", REDIS_PASSWORD: "s3cret" });
  t.equal(redisClientOptions(config, {}).password, "s3cret");
  t.equal(describeRedis(config), "redis://redis:6379/2");
  t.notMatch(JSON.stringify(describeRedis(config)), /s3cret|in-url/);
});

t.test("a Sentinel group: addresses, master name, passwords, TLS", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "redis-config-"));
  const ca = join(dir, "ca.pem");
  writeFileSync(ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  const config = loadConfig({
    REDIS_SENTINELS: "sentinel-0.redis:26379, sentinel-1.redis:26380,[fd00::1]:26381,sentinel-2.redis",
    REDIS_SENTINEL_MASTER: "queue",
    REDIS_PASSWORD: "data-pass",
    REDIS_SENTINEL_PASSWORD: "sentinel-pass",
    REDIS_SENTINEL_TLS: "true",
    REDIS_TLS_CA_FILE: ca,
  });
  t.same(config.redisSentinel?.sentinels, [
    { host: "sentinel-0.redis", port: 26379 },
    { host: "sentinel-1.redis", port: 26380 },
    { host: "fd00::1", port: 26381 },
    { host: "sentinel-2.redis", port: 26379 },
  ]);
  t.equal(config.redisSentinel?.masterName, "queue");
  t.equal(leaseReplicas(config), 1, "leases wait for one replica");
  const options = redisClientOptions(config, { maxRetriesPerRequest: null });
  t.equal(options.name, "queue");
  t.equal(options.password, "data-pass");
  t.equal(options.sentinelPassword, "sentinel-pass");
  t.equal(options.enableTLSForSentinelMode, true);
  t.match(String(options.tls?.ca), /BEGIN CERTIFICATE/, "the private CA is trusted");
  t.equal(options.maxRetriesPerRequest, null, "the caller's options are kept");
  t.equal(options.failoverDetector, true);
  t.equal(
    options.sentinelCommandTimeout,
    SENTINEL_COMMAND_TIMEOUT_MS,
    "a sentinel that never answers is passed over",
  );
  const description = describeRedis(config);
  t.equal(
    description,
    "sentinel queue via sentinel-0.redis:26379,sentinel-1.redis:26380,fd00::1:26381,sentinel-2.redis:26379",
  );
});

t.test("the master name defaults to mymaster, TLS to off", async (t) => {
  const config = loadConfig({ REDIS_SENTINELS: "a:1" });
  t.equal(config.redisSentinel?.masterName, "mymaster");
  t.equal(config.redisSentinel?.tls, false);
  t.equal(redisClientOptions(config, {}).tls, undefined);
});

t.test("mistakes are refused with the variable's name", async (t) => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ REDIS_SENTINELS: "a:1", REDIS_URL: "redis://x:6379" }, /REDIS_URL and REDIS_SENTINELS are both set/],
    [{ REDIS_SENTINEL_MASTER: "queue" }, /REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is not/],
    [{ REDIS_SENTINELS: " , " }, /REDIS_SENTINELS names no sentinel/],
    [{ REDIS_SENTINELS: "a:99999" }, /REDIS_SENTINELS: "a:99999" is not host:port/],
    [{ REDIS_SENTINELS: "a:b:c" }, /REDIS_SENTINELS: "a:b:c" is not host:port/],
    [{ REDIS_SENTINELS: "a:1", REDIS_SENTINEL_MASTER: "no spaces" }, /REDIS_SENTINEL_MASTER "no spaces"/],
    [{ REDIS_SENTINELS: "a:1", REDIS_SENTINEL_TLS: "maybe" }, /REDIS_SENTINEL_TLS must be true or false/],
  ];
  for (const [env, message] of cases) {
    const error = t.throws(() => loadConfig(env));
    t.ok(error instanceof ConfigError, `${JSON.stringify(env)}: a ConfigError`);
    t.match(error instanceof Error ? error.message : "", message);
  }
});

t.test("parseSentinelAddresses keeps the order given", async (t) => {
  t.same(parseSentinelAddresses("b:2,a:1"), [
    { host: "b", port: 2 },
    { host: "a", port: 1 },
  ]);
});

t.test("the bundled Sentinel pods' configuration (infra/redis-sentinel-init.ts)", async (t) => {
  const { peerHosts, redisConf, sentinelConf } = await import("../infra/redis-sentinel-init.ts");
  const domain = "eop-redis-headless.ops.svc";
  t.same(peerHosts("eop-redis-2", domain), [
    `eop-redis-0.${domain}`,
    `eop-redis-1.${domain}`,
    `eop-redis-2.${domain}`,
  ]);
  const me = `eop-redis-1.${domain}`;
  const replica = redisConf(me, `eop-redis-0.${domain}`, "pw");
  t.match(replica, new RegExp(`^replicaof eop-redis-0\\.${domain.replace(/\./g, "\\.")} 6379$`, "m"));
  t.match(replica, /^replica-announce-ip eop-redis-1\./m, "announces its own name");
  t.match(replica, /^requirepass pw$/m);
  t.match(replica, /^masterauth pw$/m, "replicas authenticate to the primary");
  t.notMatch(redisConf(me, undefined), /replicaof|requirepass/, "a primary without a password");
  const sentinel = sentinelConf(me, `eop-redis-0.${domain}`, {
    podName: "eop-redis-1",
    domain,
    masterName: "mymaster",
    quorum: 2,
    downAfterMs: 5000,
    password: "pw",
    confDir: "/conf",
  });
  t.match(sentinel, /^sentinel monitor mymaster eop-redis-0\.\S+ 6379 2$/m);
  t.match(sentinel, /^sentinel resolve-hostnames yes$/m);
  t.match(sentinel, /^sentinel auth-pass mymaster pw$/m);
});

t.test(
  "a pod the sentinels name as primary waits for a failover only while another server holds data",
  async (t) => {
    const { peersHold } = await import("../infra/redis-sentinel-init.ts");
    const { startRedis } = await import("../infra/local/redis.ts");
    const { freePort, stopDaemon } = await import("../infra/local/daemons.ts");
    const { Redis } = await import("ioredis");
    const dir = mkdtempSync(join(tmpdir(), "eop-sentinel-init-"));
    const start = (name: string) =>
      startRedis({
        dir: join(dir, name),
        logFile: join(dir, `${name}.log`),
        pidFile: join(dir, `${name}.pid`),
      });
    const [primary, synced, fresh] = await Promise.all([start("primary"), start("synced"), start("fresh")]);
    const clients = [primary, synced, fresh].map((s) => new Redis(s.port, { lazyConnect: true }));
    t.teardown(async () => {
      for (const c of clients) c.disconnect();
      await Promise.all([primary, synced, fresh].map((s) => stopDaemon(s.record)));
    });
    const [toPrimary, toSynced, toFresh] = clients;
    if (!toPrimary || !toSynced || !toFresh) throw new Error("three clients");
    await toPrimary.set("eop:some-job", "1");
    await toSynced.replicaof("127.0.0.1", primary.port);
    // A replica of a primary that never answered, as every pod's server is after all were replaced.
    await toFresh.replicaof("127.0.0.1", await freePort());
    const deadline = Date.now() + 15_000;
    while (!/master_link_status:up/.test(await toSynced.info("replication")) && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 100));
    t.match(await toSynced.info("replication"), /master_link_status:up/, "the replica synced");

    const host = "127.0.0.1";
    t.same(
      await peersHold([host], undefined, fresh.port),
      { kind: "empty" },
      "a replica that never synced holds nothing a failover could bring back: no wait",
    );
    t.same(
      await peersHold([host], undefined, synced.port),
      { kind: "data", host },
      "a replica that synced holds the queue's keys: wait for the sentinels to promote it",
    );
    t.same(
      await peersHold([host], undefined, primary.port),
      { kind: "data", host },
      "so can a server with writes",
    );
    t.same(
      await peersHold(["127.0.0.1", "localhost"], undefined, await freePort()),
      { kind: "unknown" },
      "no server answers: unknown (the pod keeps waiting, as before)",
    );
  },
);

// A Redis Sentinel group on loopback, from Debian's redis-server and redis-sentinel: one primary,
// two replicas, three sentinels (quorum 2), all with their files and pid files in one folder (a
// folder of a local instance is cleaned up with it). Tests kill the primary and watch the
// sentinels promote a replica; `failoverAfterMs` is how long the sentinels wait before they call
// a silent primary down (Redis's default is 30 s; tests use 1 s).
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import {
  freePort,
  isOurProcess,
  type PidRecord,
  readPidFile,
  startDaemon,
  stopDaemon,
  waitUntil,
} from "./daemons.ts";
import { redisPing, redisServerPath } from "./redis.ts";

export const SENTINEL_MASTER = "etcd-operator";

export interface SentinelGroupOptions {
  dir: string;
  /** Sentinels' down-after-milliseconds. */
  failoverAfterMs?: number;
}

export interface RedisNode {
  port: number;
  name: string;
  pidFile: string;
  logFile: string;
}

export interface SentinelGroup {
  masterName: string;
  sentinels: { host: string; port: number }[];
  /** REDIS_SENTINELS for the operator. */
  sentinelsEnv: string;
  servers: RedisNode[];
  /** The port of the primary the sentinels name now. */
  primaryPort(): Promise<number>;
  /** SIGKILLs the current primary (as a lost node) and returns its port. */
  killPrimary(): Promise<number>;
  /** Waits until the sentinels name a primary other than `port` that answers as a primary. */
  awaitFailover(fromPort: number, timeoutMs?: number): Promise<number>;
  /** Starts a killed server again (it rejoins as a replica of the current primary). */
  restart(port: number): Promise<void>;
  /**
   * Every server stopped for `downMs` (the sentinels keep running, with no one to promote), then
   * started again: the primary as before, the others as its replicas, their data from their files.
   */
  outage(downMs: number): Promise<void>;
  /** Stops every server and sentinel. */
  stop(): Promise<void>;
}

export function redisSentinelPath(): string {
  try {
    return execFileSync("sh", ["-c", "command -v redis-sentinel"], { encoding: "utf8" }).trim();
  } catch (error) {
    throw new Error(
      "redis-sentinel is not installed: run `apt-get install redis-sentinel` (npm test does it for you)",
      { cause: error },
    );
  }
}

function serverArgs(node: RedisNode, dir: string, replicaOf?: number): string[] {
  return [
    "--port",
    String(node.port),
    "--bind",
    "127.0.0.1",
    "--dir",
    dir,
    "--dbfilename",
    `${node.name}.rdb`,
    "--appendonly",
    "yes",
    "--appendfilename",
    `${node.name}.aof`,
    "--appenddirname",
    `${node.name}-aof`,
    "--appendfsync",
    "everysec",
    "--save",
    "",
    "--daemonize",
    "no",
    "--maxmemory-policy",
    "noeviction",
    // What sentinels announce to clients and to each other: the loopback address and this port.
    "--replica-announce-ip",
    "127.0.0.1",
    // A replica (re)joining is served at once, not after the default 5 s wait for others.
    "--repl-diskless-sync-delay",
    "0",
    ...(replicaOf === undefined ? [] : ["--replicaof", "127.0.0.1", String(replicaOf)]),
  ];
}

async function askSentinels<T>(
  sentinels: { host: string; port: number }[],
  ask: (client: Redis) => Promise<T>,
): Promise<T | undefined> {
  for (const sentinel of sentinels) {
    const client = new Redis({
      ...sentinel,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      connectTimeout: 1_000,
    });
    try {
      await client.connect();
      return await ask(client);
    } catch {
      // The next sentinel answers.
    } finally {
      client.disconnect();
    }
  }
  return undefined;
}

/** Whether the server on `port` is a replica whose link to its primary is up (in sync). */
async function replicaInSync(port: number): Promise<boolean> {
  const client = new Redis({
    port,
    host: "127.0.0.1",
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: 1_000,
  });
  try {
    await client.connect();
    return /master_link_status:up/.test(await client.info("replication"));
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

async function role(port: number): Promise<string | undefined> {
  const client = new Redis({
    port,
    host: "127.0.0.1",
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: 1_000,
  });
  try {
    await client.connect();
    const reply = await client.role();
    return typeof reply[0] === "string" ? reply[0] : undefined;
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
}

export async function startSentinelGroup(options: SentinelGroupOptions): Promise<SentinelGroup> {
  const { dir } = options;
  mkdirSync(dir, { recursive: true });
  const server = redisServerPath();
  const sentinel = redisSentinelPath();
  const servers: RedisNode[] = [];
  for (const index of [0, 1, 2]) {
    const name = `redis-${index}`;
    servers.push({
      port: await freePort(),
      name,
      pidFile: join(dir, `${name}.pid`),
      logFile: join(dir, `${name}.log`),
    });
  }
  const [primary] = servers;
  if (!primary) throw new Error("no servers");
  const start = async (node: RedisNode, replicaOf?: number) => {
    const record = startDaemon({
      name: node.name,
      command: server,
      args: serverArgs(node, dir, replicaOf),
      logFile: node.logFile,
      pidFile: node.pidFile,
    });
    await waitUntil(() => redisPing(node.port), {
      what: node.name,
      timeoutMs: 15_000,
      alive: () => isOurProcess(record),
      logFile: node.logFile,
    });
  };
  for (const node of servers) await start(node, node === primary ? undefined : primary.port);
  const replicas = servers.filter((node) => node !== primary);
  await waitUntil(
    async () => (await Promise.all(replicas.map((n) => replicaInSync(n.port)))).every(Boolean),
    {
      what: "both replicas to be in sync with the primary",
      timeoutMs: 30_000,
    },
  );

  const sentinels: { host: string; port: number }[] = [];
  for (const index of [0, 1, 2]) {
    const port = await freePort();
    const name = `sentinel-${index}`;
    const conf = join(dir, `${name}.conf`);
    // Sentinel rewrites its own file (the known replicas, sentinels and epoch), so each has one.
    writeFileSync(
      conf,
      [
        `port ${port}`,
        "bind 127.0.0.1",
        "daemonize no",
        `dir ${dir}`,
        "sentinel announce-ip 127.0.0.1",
        `sentinel monitor ${SENTINEL_MASTER} 127.0.0.1 ${primary.port} 2`,
        `sentinel down-after-milliseconds ${SENTINEL_MASTER} ${options.failoverAfterMs ?? 1_000}`,
        `sentinel failover-timeout ${SENTINEL_MASTER} 10000`,
        `sentinel parallel-syncs ${SENTINEL_MASTER} 1`,
        "",
      ].join("\n"),
    );
    const logFile = join(dir, `${name}.log`);
    const record = startDaemon({
      name,
      command: sentinel,
      args: [conf],
      logFile,
      pidFile: join(dir, `${name}.pid`),
    });
    await waitUntil(() => redisPing(port), {
      what: name,
      timeoutMs: 15_000,
      alive: () => isOurProcess(record),
      logFile,
    });
    sentinels.push({ host: "127.0.0.1", port });
  }

  const primaryPort = async (): Promise<number> => {
    const address = await askSentinels(sentinels, (client) =>
      client.call("SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER),
    );
    const port = Array.isArray(address) ? Number(address[1]) : Number.NaN;
    if (!Number.isInteger(port)) throw new Error("no sentinel names a primary");
    return port;
  };
  // Every sentinel has seen both replicas (so any of them can lead a failover).
  await waitUntil(
    async () => {
      const counts = await Promise.all(
        sentinels.map((s) =>
          askSentinels([s], async (client) => {
            const replicas = await client.call("SENTINEL", "replicas", SENTINEL_MASTER);
            const others = await client.call("SENTINEL", "sentinels", SENTINEL_MASTER);
            return Array.isArray(replicas) && Array.isArray(others)
              ? Math.min(replicas.length, others.length)
              : 0;
          }),
        ),
      );
      return counts.every((count) => count === 2);
    },
    { what: "the sentinels to know both replicas and each other", timeoutMs: 30_000 },
  );

  const nodeAt = (port: number): RedisNode => {
    const node = servers.find((n) => n.port === port);
    if (!node) throw new Error(`no server of the group listens on ${port}`);
    return node;
  };
  const stopNode = async (pidFile: string, graceMs: number) => {
    const record: PidRecord | undefined = readPidFile(pidFile);
    if (record) await stopDaemon(record, graceMs);
  };
  return {
    masterName: SENTINEL_MASTER,
    sentinels,
    sentinelsEnv: sentinels.map((s) => `${s.host}:${s.port}`).join(","),
    servers,
    primaryPort,
    async killPrimary() {
      const port = await primaryPort();
      await stopNode(nodeAt(port).pidFile, 0);
      return port;
    },
    async awaitFailover(fromPort, timeoutMs = 30_000) {
      let promoted = fromPort;
      await waitUntil(
        async () => {
          promoted = await primaryPort().catch(() => fromPort);
          return promoted !== fromPort && (await role(promoted)) === "master";
        },
        { what: `the sentinels to promote a replica of ${fromPort}`, timeoutMs },
      );
      return promoted;
    },
    async restart(port) {
      await start(nodeAt(port), await primaryPort());
      await waitUntil(() => replicaInSync(port), {
        what: `${nodeAt(port).name} to be in sync`,
        timeoutMs: 30_000,
      });
    },
    async outage(downMs) {
      const primaryAt = await primaryPort();
      for (const node of servers) await stopNode(node.pidFile, 5_000);
      await new Promise((resolve) => setTimeout(resolve, downMs));
      await start(nodeAt(primaryAt));
      for (const node of servers) if (node.port !== primaryAt) await start(node, primaryAt);
      await waitUntil(
        async () =>
          (
            await Promise.all(servers.filter((n) => n.port !== primaryAt).map((n) => replicaInSync(n.port)))
          ).every(Boolean),
        { what: "both replicas to be in sync again", timeoutMs: 30_000 },
      );
    },
    async stop() {
      for (let index = 0; index < 3; index++) await stopNode(join(dir, `sentinel-${index}.pid`), 5_000);
      for (const node of servers) await stopNode(node.pidFile, 5_000);
    },
  };
}

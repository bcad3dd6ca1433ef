// A Redis Sentinel group on loopback, from Debian's redis-server and redis-sentinel: one primary,
// two replicas, three sentinels (quorum 2), all with their files and pid files in one folder (a
// folder of a local instance is cleaned up with it). Tests kill the primary and watch the
// sentinels promote a replica; `failoverAfterMs` is how long the sentinels wait before they call
// a silent primary down (Redis's default is 30 s; tests use 1 s).
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
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
import { redisServerPath } from "./redis.ts";

export const SENTINEL_MASTER = "etcd-operator";

export interface SentinelGroupOptions {
  dir: string;
  /** Sentinels' down-after-milliseconds. */
  failoverAfterMs?: number;
  /** TLS only, on every server and sentinel (no plain port), with these PEM files. */
  tls?: { certFile: string; keyFile: string; caFile: string };
  /** `requirepass` of the servers (and what replicas and sentinels authenticate with). */
  password?: string;
  /** `requirepass` of the sentinels. */
  sentinelPassword?: string;
}

/** How the group's own checks reach a server or a sentinel (TLS and passwords as configured). */
type Connect = (port: number, kind: "server" | "sentinel") => Redis;

function connector(options: SentinelGroupOptions): Connect {
  const ca = options.tls ? readFileSync(options.tls.caFile) : undefined;
  return (port, kind) => {
    const password = kind === "server" ? options.password : options.sentinelPassword;
    return new Redis({
      port,
      host: "127.0.0.1",
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      connectTimeout: 1_000,
      retryStrategy: () => null,
      ...(password ? { password } : {}),
      ...(ca ? { tls: { ca } } : {}),
    });
  };
}

/** Runs `ask` on a fresh connection; undefined when the node does not answer. */
async function ask<T>(
  connect: Connect,
  port: number,
  kind: "server" | "sentinel",
  work: (c: Redis) => Promise<T>,
) {
  const client = connect(port, kind);
  client.on("error", () => {});
  try {
    await client.connect();
    return await work(client);
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
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

function serverArgs(node: RedisNode, options: SentinelGroupOptions, replicaOf?: number): string[] {
  const { dir, tls, password } = options;
  return [
    ...(tls
      ? [
          "--port",
          "0",
          "--tls-port",
          String(node.port),
          "--tls-cert-file",
          tls.certFile,
          "--tls-key-file",
          tls.keyFile,
          "--tls-ca-cert-file",
          tls.caFile,
          "--tls-auth-clients",
          "no",
          "--tls-replication",
          "yes",
        ]
      : ["--port", String(node.port)]),
    ...(password ? ["--requirepass", password, "--masterauth", password] : []),
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

export async function startSentinelGroup(options: SentinelGroupOptions): Promise<SentinelGroup> {
  const { dir } = options;
  mkdirSync(dir, { recursive: true });
  const connect = connector(options);
  const pong = (port: number, kind: "server" | "sentinel") =>
    ask(connect, port, kind, async (c) => (await c.ping()) === "PONG").then((ok) => ok === true);
  const replicaInSync = (port: number) =>
    ask(connect, port, "server", async (c) => /master_link_status:up/.test(await c.info("replication"))).then(
      (ok) => ok === true,
    );
  const role = (port: number) =>
    ask(connect, port, "server", async (c) => {
      const reply = await c.role();
      return typeof reply[0] === "string" ? reply[0] : undefined;
    });
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
      args: serverArgs(node, options, replicaOf),
      logFile: node.logFile,
      pidFile: node.pidFile,
    });
    await waitUntil(() => pong(node.port, "server"), {
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
        ...(options.tls
          ? [
              "port 0",
              `tls-port ${port}`,
              `tls-cert-file ${options.tls.certFile}`,
              `tls-key-file ${options.tls.keyFile}`,
              `tls-ca-cert-file ${options.tls.caFile}`,
              "tls-auth-clients no",
              "tls-replication yes",
            ]
          : [`port ${port}`]),
        "bind 127.0.0.1",
        "daemonize no",
        `dir ${dir}`,
        "sentinel announce-ip 127.0.0.1",
        `sentinel monitor ${SENTINEL_MASTER} 127.0.0.1 ${primary.port} 2`,
        `sentinel down-after-milliseconds ${SENTINEL_MASTER} ${options.failoverAfterMs ?? 1_000}`,
        `sentinel failover-timeout ${SENTINEL_MASTER} 10000`,
        `sentinel parallel-syncs ${SENTINEL_MASTER} 1`,
        ...(options.password ? [`sentinel auth-pass ${SENTINEL_MASTER} ${options.password}`] : []),
        // A sentinel with a password authenticates to the other sentinels with the same one.
        ...(options.sentinelPassword
          ? [`requirepass ${options.sentinelPassword}`, `sentinel sentinel-pass ${options.sentinelPassword}`]
          : []),
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
    await waitUntil(() => pong(port, "sentinel"), {
      what: name,
      timeoutMs: 15_000,
      alive: () => isOurProcess(record),
      logFile,
    });
    sentinels.push({ host: "127.0.0.1", port });
  }

  const askSentinels = async <T>(sentinelList: { port: number }[], work: (c: Redis) => Promise<T>) => {
    for (const sentinel of sentinelList) {
      const answer = await ask(connect, sentinel.port, "sentinel", work);
      if (answer !== undefined) return answer;
    }
    return undefined;
  };
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
      // SIGKILL itself (stopDaemon would send SIGTERM first, and Redis then shuts down in order).
      const record = readPidFile(nodeAt(port).pidFile);
      if (record && isOurProcess(record)) process.kill(record.pid, "SIGKILL");
      await waitUntil(async () => !(record && isOurProcess(record)), {
        what: `the primary on ${port} to be gone`,
        timeoutMs: 10_000,
      });
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

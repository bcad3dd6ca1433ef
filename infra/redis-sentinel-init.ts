// The init container of each pod of the chart's bundled Redis Sentinel group (redis.sentinel.bundled),
// run from the operator's image: writes the pod's redis.conf and sentinel.conf into /conf.
//   node /app/infra/redis-sentinel-init.ts
// A pod joins as a replica of whichever server the sentinels name as primary now; only when no
// sentinel answers (a new install, or every pod gone at once) does pod 0 start as the primary and
// the others as its replicas. A pod the sentinels still name as primary is one that restarted
// before they noticed: it has lost its data (an emptyDir), so it waits until they promote a
// replica rather than come back empty as the primary and have the replicas copy nothing, but only
// while another server holds data: when every pod was replaced at once, no replica can be promoted.
// Settings come from the environment the chart sets:
//   POD_NAME, SERVICE_DOMAIN (the headless Service's domain), MASTER_NAME, SENTINEL_QUORUM,
//   DOWN_AFTER_MS, REDIS_PASSWORD (optional), CONF_DIR (default /conf)
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { SENTINEL_COMMAND_TIMEOUT_MS } from "../shared/redis-connection.ts";

const REDIS_PORT = 6379;
const SENTINEL_PORT = 26379;
/** How long a pod the sentinels still name as primary waits for them to promote another. */
const WAIT_FOR_FAILOVER_MS = 90_000;

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

interface Settings {
  podName: string;
  domain: string;
  masterName: string;
  quorum: number;
  downAfterMs: number;
  password?: string;
  confDir: string;
}

function settings(): Settings {
  const password = process.env.REDIS_PASSWORD;
  return {
    podName: required("POD_NAME"),
    domain: required("SERVICE_DOMAIN"),
    masterName: required("MASTER_NAME"),
    quorum: Number(process.env.SENTINEL_QUORUM ?? 2),
    // Sentinel promotes only a replica whose link to the lost primary has been down for at most
    // 10 × this plus the time since the sentinels noticed. Losing a node can stall a sentinel's
    // hostname lookups (TILT) so that it notices late: 80 s after the replicas in one run, and at
    // 5 s every failover then aborted with "no good slave" for as long as the node stayed lost.
    downAfterMs: Number(process.env.DOWN_AFTER_MS ?? 15_000),
    ...(password ? { password } : {}),
    confDir: process.env.CONF_DIR ?? "/conf",
  };
}

/** The pods' DNS names, from this pod's name: <statefulset>-0, -1, -2 under the headless Service. */
export function peerHosts(podName: string, domain: string, replicas = 3): string[] {
  const base = podName.replace(/-\d+$/, "");
  return Array.from({ length: replicas }, (_, i) => `${base}-${i}.${domain}`);
}

/** The primary the first answering sentinel names, or undefined when none answers. */
async function primaryNamedBySentinels(hosts: string[], masterName: string): Promise<string | undefined> {
  for (const host of hosts) {
    const client = new Redis({
      host,
      port: SENTINEL_PORT,
      lazyConnect: true,
      connectTimeout: 1_000,
      // A sentinel that takes the connection and never answers would hold the pod's start forever.
      commandTimeout: SENTINEL_COMMAND_TIMEOUT_MS,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    client.on("error", () => {});
    try {
      await client.connect();
      const reply = await client.call("SENTINEL", "get-master-addr-by-name", masterName);
      if (Array.isArray(reply) && typeof reply[0] === "string") return reply[0];
    } catch {
      // Not up (yet), or unknown name: ask the next.
    } finally {
      client.disconnect();
    }
  }
  return undefined;
}

/**
 * What the other servers of the group hold: `data` when one of them has keys (the queue's state, on
 * a replica the sentinels can promote), `empty` when some answered and none has (every pod was
 * replaced at once: no failover can come, and none would bring anything back), `unknown` when none
 * answered.
 */
export async function peersHold(
  peers: string[],
  password: string | undefined,
  port = REDIS_PORT,
): Promise<{ kind: "data"; host: string } | { kind: "empty" } | { kind: "unknown" }> {
  let answered = false;
  for (const host of peers) {
    const client = new Redis({
      host,
      port,
      lazyConnect: true,
      connectTimeout: 1_000,
      commandTimeout: SENTINEL_COMMAND_TIMEOUT_MS,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      ...(password ? { password } : {}),
    });
    client.on("error", () => {});
    try {
      await client.connect();
      const keys = await client.dbsize();
      answered = true;
      if (keys > 0) return { kind: "data", host };
    } catch {
      // Not up (yet): it says nothing either way.
    } finally {
      client.disconnect();
    }
  }
  return answered ? { kind: "empty" } : { kind: "unknown" };
}

export function redisConf(me: string, primary: string | undefined, password?: string): string {
  return [
    `port ${REDIS_PORT}`,
    "protected-mode no",
    "dir /data",
    'save ""',
    "appendonly no",
    "maxmemory-policy noeviction",
    `replica-announce-ip ${me}`,
    "repl-diskless-sync-delay 0",
    ...(password ? [`requirepass ${password}`, `masterauth ${password}`] : []),
    ...(primary ? [`replicaof ${primary} ${REDIS_PORT}`] : []),
    "",
  ].join("\n");
}

export function sentinelConf(me: string, primary: string, s: Settings): string {
  return [
    `port ${SENTINEL_PORT}`,
    "protected-mode no",
    `dir ${s.confDir}`,
    "sentinel resolve-hostnames yes",
    "sentinel announce-hostnames yes",
    `sentinel announce-ip ${me}`,
    `sentinel monitor ${s.masterName} ${primary} ${REDIS_PORT} ${s.quorum}`,
    `sentinel down-after-milliseconds ${s.masterName} ${s.downAfterMs}`,
    `sentinel failover-timeout ${s.masterName} 60000`,
    `sentinel parallel-syncs ${s.masterName} 1`,
    ...(s.password ? [`sentinel auth-pass ${s.masterName} ${s.password}`] : []),
    "",
  ].join("\n");
}

async function main(): Promise<void> {
  const s = settings();
  const hosts = peerHosts(s.podName, s.domain);
  const me = `${s.podName}.${s.domain}`;
  let primary = await primaryNamedBySentinels(hosts, s.masterName);
  if (primary === me) {
    process.stdout.write(
      `the sentinels still name ${me} as primary; waiting for them to promote a replica\n`,
    );
    const peers = hosts.filter((host) => host !== me);
    const deadline = Date.now() + WAIT_FOR_FAILOVER_MS;
    while (primary === me && Date.now() < deadline) {
      const held = await peersHold(peers, s.password);
      if (held.kind === "empty") {
        // The others follow the sentinels' name, this pod's: it starts as the primary, as it would
        // after the wait, without the wait.
        process.stdout.write("no other server holds data (every pod was replaced): no failover can come\n");
        break;
      }
      await sleep(1_000);
      primary = await primaryNamedBySentinels(hosts, s.masterName);
    }
  }
  const first = hosts[0] ?? me;
  // No sentinel answers: a new group (or all of it restarted), formed around pod 0.
  const replicaOf =
    primary === undefined ? (me === first ? undefined : first) : primary === me ? undefined : primary;
  writeFileSync(join(s.confDir, "redis.conf"), redisConf(me, replicaOf, s.password), { mode: 0o600 });
  writeFileSync(join(s.confDir, "sentinel.conf"), sentinelConf(me, replicaOf ?? me, s), { mode: 0o600 });
  process.stdout.write(
    replicaOf ? `${me} starts as a replica of ${replicaOf}\n` : `${me} starts as the primary\n`,
  );
}

if (import.meta.main) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}

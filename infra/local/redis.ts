// Redis for BullMQ, from Debian's redis-server, on a free loopback port with its data (an
// append-only file) in the instance's folder, so a restart keeps the queues; the operator also
// rebuilds its work from the cluster state when Redis is wiped.
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createConnection } from "node:net";
import { freePort, isOurProcess, type PidRecord, startDaemon, waitUntil } from "./daemons.ts";

export interface RedisOptions {
  dir: string;
  logFile: string;
  pidFile: string;
  port?: number;
}

export function redisServerPath(): string {
  try {
    return execFileSync("sh", ["-c", "command -v redis-server"], { encoding: "utf8" }).trim();
  } catch (error) {
    throw new Error(
      "redis-server is not installed: run `apt-get install redis-server` (npm test does it for you)",
      {
        cause: error,
      },
    );
  }
}

/** Sends PING with the inline protocol and resolves true on +PONG. */
export function redisPing(port: number, host = "127.0.0.1"): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.on("error", () => done(false));
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (data) => done(data.toString().startsWith("+PONG")));
  });
}

export async function startRedis(
  options: RedisOptions,
): Promise<{ url: string; port: number; record: PidRecord }> {
  const command = redisServerPath();
  const port = options.port ?? (await freePort());
  mkdirSync(options.dir, { recursive: true });
  const record = startDaemon({
    name: "redis",
    command,
    args: [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--dir",
      options.dir,
      // Append-only persistence, as BullMQ recommends: a restarted Redis keeps its queues
      // (tests that want them gone flush them on purpose).
      "--save",
      "",
      "--appendonly",
      "yes",
      "--appendfsync",
      "everysec",
      "--daemonize",
      "no",
      // BullMQ requires that Redis never evicts its keys.
      "--maxmemory-policy",
      "noeviction",
      // Redis's timer at its default 10 Hz is most of what it costs at rest; the workers promote
      // their short delays themselves (shared/prompt-delay.ts), so 1 Hz slows nothing that matters.
      "--hz",
      "1",
    ],
    logFile: options.logFile,
    pidFile: options.pidFile,
  });
  await waitUntil(() => redisPing(port), {
    what: "redis-server",
    timeoutMs: 15_000,
    alive: () => isOurProcess(record),
    logFile: options.logFile,
  });
  return { url: `redis://127.0.0.1:${port}`, port, record };
}

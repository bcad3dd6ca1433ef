// Runs operator roles as real child processes for end-to-end tests, so a test can SIGKILL a
// worker mid-step exactly as a node failure would.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { LocalCluster } from "../../infra/local/control-plane.ts";
import type { PidRecord } from "../../infra/local/daemons.ts";

import { OPERATOR_ENV, OPERATOR_NODE_FLAGS } from "../../infra/operator.ts";

/** The sources, as tests run them; a bundle's entry (infra/bundle.ts) runs the operator as its image does. */
export const SOURCE_ENTRY = new URL("../../infra/operator.ts", import.meta.url).pathname;

export interface OperatorProcess {
  role: string;
  child: ChildProcess;
  logFile: string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

let counter = 0;

/** This process's environment variables that `keep` picks, to pass on to the operator's. */
function passThrough(keep: (name: string) => boolean): Record<string, string> {
  return Object.fromEntries(
    Object.entries(process.env).flatMap(([name, value]) => (keep(name) && value ? [[name, value]] : [])),
  );
}

export function operatorEnv(
  cluster: LocalCluster,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/root",
    KUBECONFIG: cluster.kubeconfigPath,
    REDIS_URL: cluster.redisUrl ?? "",
    ...OPERATOR_ENV,
    MY_POD_NAMESPACE: "default",
    RECONCILE_INTERVAL_MS: "3000",
    LOG_LEVEL: "debug",
    // Role "all" runs the HTTP server: a free port each, so processes and parallel runs never collide.
    HTTP_PORT: "0",
    // For profiling a run (e.g. OPERATOR_NODE_OPTIONS="--cpu-prof"): node options for the operator only.
    ...(process.env.OPERATOR_NODE_OPTIONS ? { NODE_OPTIONS: process.env.OPERATOR_NODE_OPTIONS } : {}),
    // glibc's malloc tuning (MALLOC_ARENA_MAX, MALLOC_TRIM_THRESHOLD_, …) and the memory keeper's
    // settings, to try them in a bench.
    ...passThrough((name) => name.startsWith("MALLOC_") || name.startsWith("MEMORY_")),
    ...extra,
  };
}

export function startOperatorProcess(
  cluster: LocalCluster,
  role: string,
  extra: Record<string, string> = {},
  entry: string = SOURCE_ENTRY,
): OperatorProcess {
  const dir = join(cluster.dir, "operator-logs");
  mkdirSync(dir, { recursive: true });
  const logFile = join(dir, `${role}-${++counter}.log`);
  const out = openSync(logFile, "a");
  // V8 flags NODE_OPTIONS refuses (e.g. OPERATOR_NODE_ARGS="--optimize-for-size"), to try them in a bench.
  const extraArgs = (process.env.OPERATOR_NODE_ARGS ?? "").split(/\s+/).filter((arg) => arg !== "");
  const child = spawn(process.execPath, [...OPERATOR_NODE_FLAGS, ...extraArgs, entry, "--role", role], {
    env: operatorEnv(cluster, extra),
    stdio: ["ignore", out, out],
  });
  // Beside its log, so that the instance's cleanup stops a process a killed test left running.
  if (child.pid !== undefined) {
    const record: PidRecord = { pid: child.pid, command: process.execPath, name: `operator ${role}` };
    writeFileSync(logFile.replace(/\.log$/, ".pid"), JSON.stringify(record));
  }
  return {
    role,
    child,
    logFile,
    kill(signal: NodeJS.Signals = "SIGTERM") {
      return new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill(signal);
      });
    },
  };
}

/**
 * The last `count` steps an operator process finished, one line each ("wait MemberStarting: …"),
 * for a timed-out wait to say what the operator was doing.
 */
export function lastSteps(p: OperatorProcess, count = 5): string {
  const lines = readFileSync(p.logFile, "utf8").trim().split("\n");
  const steps: string[] = [];
  for (const line of lines.reverse()) {
    if (steps.length >= count) break;
    try {
      const entry: unknown = JSON.parse(line);
      if (typeof entry !== "object" || entry === null) continue;
      const fields = entry as Record<string, unknown>;
      if (fields.msg === "step starting" || typeof fields.step !== "string") continue;
      const detail = [fields.reason, fields.message ?? fields.msg].filter((x) => typeof x === "string");
      steps.push(
        `${fields.step}: ${detail.join(": ")}${fields.err ? ` (${JSON.stringify(fields.err).slice(0, 300)})` : ""}`,
      );
    } catch {
      // A line that is no JSON (a crash's stack) is left out.
    }
  }
  return steps.reverse().join("\n");
}

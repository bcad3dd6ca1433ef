// The demo as a newcomer runs it, for tests/demo*.test.ts: `npm run demo` in its own process group
// with a newcomer's environment, what it printed, and what of an instance is left after it stopped.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import type { Test } from "tap";
import { waitFor } from "../../infra/local/kube-wait.ts";
import { instanceLayout } from "../../infra/local/layout.ts";
import { ROOT } from "./packaging.ts";

// A newcomer's shell: Node and npm on PATH, no KUBECONFIG, no REDIS_URL. Only HTTP_PORT=0 (a free
// port) differs, so the demo's HTTP server cannot clash with anything else listening on 8080.
export const newcomerEnv: Record<string, string> = {
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: process.env.HOME ?? "/root",
  HTTP_PORT: "0",
};
if (process.env.EOP_CACHE) newcomerEnv.EOP_CACHE = process.env.EOP_CACHE;
// Where instances live must be the same for the demo and for the tests' checks.
if (process.env.EOP_RUN_DIR) newcomerEnv.EOP_RUN_DIR = process.env.EOP_RUN_DIR;

export function alive(pid: number): boolean {
  try {
    // A zombie has exited; only its parent's wait is missing.
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** What of a local instance a demo may leave behind, looked up by the instance's name. */
export function instanceLeftovers(name: string) {
  const layout = instanceLayout(name);
  return {
    layout,
    netns(): string[] {
      return existsSync("/run/netns")
        ? readdirSync("/run/netns").filter((n) => n.startsWith(layout.network.netnsPrefix))
        : [];
    },
    bridgeExists(): boolean {
      try {
        execFileSync("ip", ["link", "show", layout.network.bridge], { stdio: "ignore" });
        return true;
      } catch {
        return false;
      }
    },
    /**
     * Waits up to 30 s for every process of the instance and of `group` to exit (a group leader may
     * exit before its last child); resolves to [] then, and fails naming those left.
     */
    exited(group: number, what: string): Promise<string[]> {
      return waitFor(what, async () => (this.processes(group).length === 0 ? [] : undefined), {
        timeoutMs: 30_000,
        describe: async () => this.processes(group).join("\n"),
      });
    },
    /** Live processes whose command line or stdout mention the instance's folder, or that are in `group`. */
    processes(group: number): string[] {
      const found: string[] = [];
      for (const entry of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
        const pid = Number(entry);
        if (pid === process.pid || !alive(pid)) continue;
        try {
          const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ").trim();
          const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
          const pgid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
          let stdout = "";
          try {
            stdout = readlinkSync(`/proc/${pid}/fd/1`);
          } catch {
            // No stdout to look at.
          }
          const inInstance = cmdline.includes(`${layout.dir}/`) || stdout.startsWith(`${layout.dir}/`);
          if (pgid === group || inInstance) found.push(`${pid}: ${cmdline}`);
        } catch {
          // The process ended while we looked.
        }
      }
      return found;
    },
  };
}

/** `npm run demo` in its own process group (so SIGINT reaches npm, bash and node together, as from a terminal). */
export interface Demo {
  group: number;
  output(): { stdout: string; stderr: string };
  /** SIGINT to the group, SIGKILL after 90 s; resolves when npm has exited. */
  interrupt(): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves with everything it printed once the instructions are out. */
  instructions(): Promise<string>;
}

export function startDemo(t: Test, args: string[], extraEnv: Record<string, string> = {}): Demo {
  let stdout = "";
  let stderr = "";
  const child: ChildProcess = spawn("npm", ["run", "demo", "--", ...args], {
    cwd: ROOT,
    env: { ...newcomerEnv, ...extraEnv },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const group = child.pid ?? 0;
  child.stdout?.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on("exit", (code, signal) => resolve({ code, signal }));
  });
  let interrupted: Promise<{ code: number | null; signal: NodeJS.Signals | null }> | undefined;
  const interrupt = () => {
    interrupted ??= (async () => {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      process.kill(-group, "SIGINT");
      const timer = setTimeout(() => {
        try {
          process.kill(-group, "SIGKILL");
        } catch {
          // Gone.
        }
      }, 90_000);
      const result = await exited;
      clearTimeout(timer);
      return result;
    })();
    return interrupted;
  };
  // Whatever happens in the test, the demo goes: SIGINT first (it cleans up), then SIGKILL.
  t.teardown(() => interrupt().then(() => undefined));
  return {
    group,
    output: () => ({ stdout, stderr }),
    interrupt,
    instructions: () =>
      waitFor(
        "the demo to print its instructions",
        async () => {
          if (child.exitCode !== null)
            throw new Error(`the demo exited with ${child.exitCode}:\n${stderr.slice(-3000)}`);
          return stdout.includes("Press Ctrl-C to stop everything.") ? stdout : undefined;
        },
        { timeoutMs: 600_000, intervalMs: 500, describe: async () => stderr.slice(-3000) },
      ),
  };
}

/** printedLine split into words. */
export function printedCommand(printed: string, marker: string): string[] {
  return printedLine(printed, marker).split(/\s+/);
}

/** The printed command line that contains `marker`, without its trailing comment. */
export function printedLine(printed: string, marker: string): string {
  const line = printed
    .split("\n")
    .map((l) => l.trim())
    .find((l) => l.includes(marker));
  if (line === undefined) throw new Error(`the demo printed no line with "${marker}":\n${printed}`);
  return line.replace(/\s+#.*$/, "");
}

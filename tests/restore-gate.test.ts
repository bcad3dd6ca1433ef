// The restore's start gate and what the restore reads off its seed pods. The gate runs as the real
// init-container process (infra/restore-init.ts await-start) on loopback; the pod statuses are the
// shapes the kubelet reports (the e2e restores in backup-restore.test.ts run them for real).
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import t from "tap";
import { BAD_BACKUP_EXIT_CODE } from "../shared/restore-paths.ts";
import {
  badBackup,
  failingRepeatedly,
  fetchSucceeded,
  openStartGate,
  STAGING_MAX_RESTARTS,
  seedProblem,
  unschedulable,
  waitingAtStartGate,
} from "../shared/restore-seeds.ts";

const INIT = join(import.meta.dirname, "..", "infra", "restore-init.ts");

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

interface Gate {
  child: ChildProcess;
  output: () => string;
  exit: Promise<number | null>;
}

function startGate(env: Record<string, string>): Gate {
  const child = spawn(process.execPath, [INIT, "await-start"], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  // A gate that never ends fails the test in seconds rather than hanging it.
  const exit = Promise.race([
    exited,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`the gate did not end; it said: ${output}`)), 15_000).unref(),
    ),
  ]);
  return { child, output: () => output, exit };
}

async function until(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

t.test("the start gate lets etcd start only for the restore's token, once", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "restore-gate-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const marker = join(dir, "restore-started");
  const port = await freePort();
  const env = { START_TOKEN: "uid-1", START_PORT: String(port), START_MARKER: marker };
  t.equal(await openStartGate("127.0.0.1", "uid-1", port), false, "nothing listens yet: not open");
  const gate = startGate(env);
  t.teardown(() => gate.child.kill("SIGKILL"));
  await until("the gate to listen", () => gate.output().includes("waiting for the old members"));

  await t.rejects(
    openStartGate("127.0.0.1", "uid-2", port),
    /refused this restore's token/,
    "another token is refused",
  );
  t.notOk(existsSync(marker), "and leaves no marker");
  t.equal(gate.child.exitCode, null, "the gate still waits");

  t.equal(await openStartGate("127.0.0.1", "uid-1", port), true, "the restore's token opens it");
  t.equal(await gate.exit, 0, "the init container ends: etcd starts next");
  t.ok(existsSync(marker), "the marker says etcd was let start");
  t.equal(await openStartGate("127.0.0.1", "uid-1", port), false, "nothing listens once it is open");

  // A re-run of the init containers (a re-created sandbox) does not wait again.
  const rerun = startGate(env);
  t.equal(await rerun.exit, 0, "a re-run passes at once");
  t.match(rerun.output(), /let start before/);
});

t.test("the start gate refuses to run without a token", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "restore-gate-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const gate = startGate({
    START_TOKEN: "",
    START_MARKER: join(dir, "m"),
    START_PORT: String(await freePort()),
  });
  t.equal(await gate.exit, 1);
  t.match(gate.output(), /START_TOKEN is not set/);
});

function status(name: string, fields: Partial<V1ContainerStatus>): V1ContainerStatus {
  return { name, image: "x", imageID: "", ready: false, restartCount: 0, ...fields };
}

function pod(init: V1ContainerStatus[], conditions: NonNullable<V1Pod["status"]>["conditions"] = []): V1Pod {
  return { metadata: { name: "c-a" }, status: { initContainerStatuses: init, conditions } };
}

const done = { terminated: { exitCode: 0, startedAt: new Date(), finishedAt: new Date() } };
const running = { running: { startedAt: new Date() } };

t.test("the restore reads where each seed is from its init containers", async (t) => {
  const fetching = pod([status("fetch-backup", { state: running }), status("restore-snapshot", {})]);
  t.notOk(fetchSucceeded(fetching), "still fetching");
  t.notOk(waitingAtStartGate(fetching));
  const restoring = pod([
    status("fetch-backup", { state: done }),
    status("restore-snapshot", { state: running }),
  ]);
  t.ok(fetchSucceeded(restoring), "fetched: etcdutl runs");
  const atGate = pod([
    status("fetch-backup", { state: done }),
    status("restore-snapshot", { state: done }),
    status("install-data-dir", { state: done }),
    status("await-start", { state: running }),
  ]);
  t.ok(waitingAtStartGate(atGate), "data dir in place, waiting at the gate");
  t.ok(fetchSucceeded(atGate));
  t.equal(seedProblem(atGate), undefined, "no problem to report");
});

t.test("a bad backup, a failing seed and an unplaceable seed are told apart", async (t) => {
  const bad = pod([
    status("fetch-backup", {
      state: { waiting: { reason: "CrashLoopBackOff" } },
      lastState: {
        terminated: {
          exitCode: BAD_BACKUP_EXIT_CODE,
          message: "backup s3://b/k is corrupt: its SHA-256 is 00, the backup recorded ff",
          startedAt: new Date(),
          finishedAt: new Date(),
        },
      },
      restartCount: 1,
    }),
  ]);
  t.match(badBackup(bad), /is corrupt: its SHA-256 is 00/, "the fetch's own words");
  t.equal(failingRepeatedly(bad), undefined, "once is not repeatedly");

  const unreachable = (restartCount: number) =>
    pod([
      status("fetch-backup", {
        state: { waiting: { reason: "CrashLoopBackOff" } },
        lastState: {
          terminated: {
            exitCode: 1,
            message: "store unreachable",
            startedAt: new Date(),
            finishedAt: new Date(),
          },
        },
        restartCount,
      }),
    ]);
  t.equal(badBackup(unreachable(5)), undefined, "an unreachable store is no bad backup");
  t.equal(failingRepeatedly(unreachable(STAGING_MAX_RESTARTS - 1)), undefined, "tried again first");
  t.match(
    failingRepeatedly(unreachable(STAGING_MAX_RESTARTS)),
    new RegExp(`fetch-backup failed: store unreachable \\(${STAGING_MAX_RESTARTS} times\\)`),
  );
  t.match(seedProblem(unreachable(1)), /init container fetch-backup failed: store unreachable/);

  const pending = pod(
    [],
    [{ type: "PodScheduled", status: "False", reason: "Unschedulable", message: "0/3 nodes are available" }],
  );
  t.equal(unschedulable(pending), "0/3 nodes are available");
  t.equal(
    unschedulable(pod([], [{ type: "PodScheduled", status: "True" }])),
    undefined,
    "a scheduled seed has room",
  );
});

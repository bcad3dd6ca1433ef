// Start/stop of the local control plane: a clean stop leaves no process, mount or network
// namespace behind, and a start after a crash (everything SIGKILLed, pods orphaned) cleans up
// what the crashed run left before it starts again.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import t from "tap";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { readPidFile } from "../infra/local/daemons.ts";
import { clientsFor, isReady, waitForPod } from "../infra/local/kube-wait.ts";
import { instanceLayout } from "../infra/local/layout.ts";
import { redisPing } from "../infra/local/redis.ts";

const NAME = "e2e-lifecycle";
const layout = instanceLayout(NAME);

function netnsOfInstance(): string[] {
  return existsSync("/run/netns")
    ? readdirSync("/run/netns").filter((n) => n.startsWith(layout.network.netnsPrefix))
    : [];
}

/** Every live process whose command line, working directory or open files mention this instance's folder. */
function processesOfInstance(): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      if (Number(pid) === process.pid) continue;
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ");
      // Redis rewrites its command line, but its log file stays open (fd 1) in the instance's folder.
      const stdout = readlinkSync(`/proc/${pid}/fd/1`);
      if (cmdline.includes(layout.dir) || stdout.startsWith(layout.dir)) found.push(`${pid}: ${cmdline}`);
    } catch {
      // The process ended while we looked.
    }
  }
  return found;
}

function mountsOfInstance(): string[] {
  return readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .filter((line) => line.includes(layout.dir) || line.includes(`/run/netns/${layout.network.netnsPrefix}`));
}

function bridgeExists(): boolean {
  try {
    execFileSync("ip", ["link", "show", layout.network.bridge], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

async function startWithAPod() {
  const cluster = await startLocalCluster({ name: NAME });
  const { core } = clientsFor(cluster.kubeconfigPath);
  await core.createNamespacedPod({
    namespace: "default",
    body: {
      metadata: { name: "held", namespace: "default" },
      spec: {
        terminationGracePeriodSeconds: 2,
        containers: [{ name: "main", image: "busybox", command: ["sleep", "3600"] }],
      },
    },
  });
  await waitForPod(core, "default", "held", "Ready", isReady);
  return cluster;
}

t.test("a clean stop leaves no process, mount, network namespace or bridge behind", async (t) => {
  const cluster = await startWithAPod();
  t.ok(cluster.redisUrl, "redis is part of the cluster");
  const redisPort = Number(new URL(cluster.redisUrl ?? "redis://x:0").port);
  t.ok(await redisPing(redisPort), "redis answers PING");
  t.equal(netnsOfInstance().length, 1, "the pod's network namespace exists while running");
  t.ok(processesOfInstance().length >= 4, "control-plane processes run");
  await cluster.stop();
  t.same(processesOfInstance(), [], "no process left");
  t.same(netnsOfInstance(), [], "no network namespace left");
  t.same(mountsOfInstance(), [], "no mount left");
  t.notOk(bridgeExists(), "bridge removed");
  t.notOk(existsSync(layout.dir), "instance folder removed");
  t.notOk(await redisPing(redisPort), "redis is stopped");
});

t.test("a start after a crash cleans up what the crashed run left behind", async (t) => {
  const crashed = await startWithAPod();
  // Simulate a crash of everything at once: SIGKILL leaves the pod's process and netns behind.
  for (const daemon of ["kubelet", "kube-controller-manager", "kube-apiserver", "redis", "etcd"]) {
    const record = readPidFile(`${layout.dir}/${daemon}.pid`);
    if (record) process.kill(record.pid, "SIGKILL");
  }
  t.equal(netnsOfInstance().length, 1, "the orphaned pod network namespace is still there after the crash");
  const orphans = execFileSync("ip", ["netns", "pids", netnsOfInstance()[0] ?? ""], { encoding: "utf8" })
    .trim()
    .split("\n")
    .filter(Boolean);
  t.ok(orphans.length >= 1, "the pod's process outlived the crash");
  const restarted = await startLocalCluster({ name: NAME });
  t.teardown(() => restarted.stop());
  t.same(netnsOfInstance(), [], "the leftover network namespace was removed before starting");
  for (const pid of orphans) t.notOk(existsSync(`/proc/${pid}`), `orphaned pod process ${pid} was killed`);
  const { core } = clientsFor(restarted.kubeconfigPath);
  const pods = await core.listNamespacedPod({ namespace: "default" });
  t.equal(pods.items.length, 0, "the new cluster starts empty");
  t.not(restarted.startedAt, crashed.startedAt, "a new control plane runs");
});

// Benchmark: what the operator costs when nothing happens, and what one cluster's life costs.
//   node bench/rest.ts [--seconds 180] [--runs 3] [--save]
// One `--role all` operator process (the bundle the image runs, LOG_LEVEL info, every setting at
// its default) beside the local control plane's Redis. Prints one JSON object:
//   - round: operator + Redis CPU seconds for create (size 3) → heal (a follower's pod deleted) →
//     scale 3 → 5, each until the cluster is steady with every member Ready (goal ≤ 0.35 s), the
//     first time in the process and again on a second cluster;
//   - rest: with one steady 3-member cluster, `runs` windows of `seconds` each: operator and Redis
//     CPU seconds (goal ≤ 0.15 s per 180 s, Redis included) and RSS after each window (goal ≤ 80
//     MiB), the kube-apiserver requests the operator made in the window;
//   - healOnVolume: a member of a cluster on PersistentVolumeClaims loses its pod; ms from the
//     delete until etcd answers healthy on the member's new pod (goal ≤ 450 ms), `runs` times.
// Runs against the local control plane; never part of the default tests.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { readPidFile } from "../infra/local/daemons.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { loadConfig } from "../shared/config.ts";
import { endpointStatuses, leaderId } from "../shared/etcd-members.ts";
import { Kube } from "../shared/kube.ts";
import {
  type ClusterClients,
  createCluster,
  deleteCluster,
  patchSpec,
  waitReady,
} from "../tests/helpers/clusters.ts";
import { startOperatorProcess } from "../tests/helpers/operator-processes.ts";
import { apiRequestCounts, countsSince } from "./api-requests.ts";
import { operatorBuild } from "./operator-entry.ts";
import { saveResults } from "./results.ts";
import { processCpuSeconds as cpuSeconds, keepLogs, load, processRssMiB, summary } from "./stats.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "180" },
    runs: { type: "string", default: "3" },
    save: { type: "boolean", default: false },
  },
});
const SECONDS = Number(values.seconds);
const RUNS = Number(values.runs);
const NS = "default";
const GOALS = { restCpuSeconds: 0.15, rssMiB: 80, roundCpuSeconds: 0.35, healOnVolumeMs: 450 } as const;
const progress = (line: string) => process.stderr.write(`${line}\n`);

const build = await operatorBuild(progress);
const cluster = await startLocalCluster({ name: "bench-rest", log: () => {} });
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const clients: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
const defaults = loadConfig({});
const operator = startOperatorProcess(
  cluster,
  "all",
  {
    LOG_LEVEL: "info",
    RECONCILE_INTERVAL_MS: String(defaults.reconcileIntervalMs),
    INSTALL_CRDS: "false",
  },
  build.entry,
);
const redisPid = readPidFile(join(cluster.dir, "redis.pid"))?.pid;
const both = () => cpuSeconds(operator.child.pid) + cpuSeconds(redisPid);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** As bench/convergence.ts deletes: at once, so the figure is the operator's and not the grace period. */
async function deletePod(name: string): Promise<void> {
  await core.deleteNamespacedPod({ namespace: NS, name, gracePeriodSeconds: 0 });
}

async function memberPodNames(name: string): Promise<string[]> {
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
  return pods.items.flatMap((p) => (p.metadata?.name ? [p.metadata.name] : [])).sort();
}

/** A follower's pod (a member's name is its pod's name), asked of the members themselves. */
async function followerPod(name: string): Promise<string> {
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` })).items;
  const statuses = await endpointStatuses(pods.map((p) => `http://${p.status?.podIP}:2379`));
  const leader = leaderId(statuses);
  const index = statuses.findIndex((s) => s.ok && s.memberId !== leader);
  const pod = pods[index]?.metadata?.name;
  if (!leader || !pod) throw new Error(`${name} has no follower pod`);
  return pod;
}

/** create → heal → scale 3 → 5, the CPU of the operator and Redis over all of it. */
async function round(name: string): Promise<{ operatorAndRedisCpuSeconds: number; wallSeconds: number }> {
  const start = both();
  const wall = performance.now();
  await createCluster(clients, NS, name, { size: 3 });
  await waitReady(clients, NS, name, 3);
  const healed = await followerPod(name);
  await deletePod(healed);
  await waitFor(`${healed} replaced`, async () =>
    !(await memberPodNames(name)).includes(healed) ? true : undefined,
  );
  await waitReady(clients, NS, name, 3);
  await patchSpec(clients, NS, name, { size: 5 });
  await waitReady(clients, NS, name, 5);
  const result = {
    operatorAndRedisCpuSeconds: Number((both() - start).toFixed(2)),
    wallSeconds: Number(((performance.now() - wall) / 1000).toFixed(1)),
  };
  progress(`round on ${name}: ${JSON.stringify(result)}`);
  return result;
}

try {
  await waitFor("the operator's first lists", async () =>
    (await readFile(operator.logFile, "utf8")).includes('"msg":"watching"') ? true : undefined,
  );
  // The round twice: first in a process that has not run it yet (V8 compiles as it goes), then
  // again, which is what a running operator pays for each cluster's create, heal and scale.
  const firstRound = await round("first");
  await deleteCluster(clients, NS, "first");
  const warmRound = await round("rest");
  await patchSpec(clients, NS, "rest", { size: 3 });
  await waitReady(clients, NS, "rest", 3);
  // Whatever the round left to finish (status writes, deferred work) settles before the windows.
  await sleep(30_000);

  const windows: {
    operatorCpu: number;
    redisCpu: number;
    total: number;
    rssMiB: number;
    requests: number;
  }[] = [];
  let requestsByKind: Record<string, number> = {};
  for (let run = 1; run <= RUNS; run++) {
    const operatorBefore = cpuSeconds(operator.child.pid);
    const redisBefore = cpuSeconds(redisPid);
    const requestsBefore = await apiRequestCounts(kc);
    progress(`rest window ${run}/${RUNS}: ${SECONDS} s`);
    await sleep(SECONDS * 1000);
    // The bench's own reading of /metrics is not the operator's request.
    const { "GET metrics": _reading, ...requests } = countsSince(requestsBefore, await apiRequestCounts(kc));
    requestsByKind = requests;
    const operatorCpu = cpuSeconds(operator.child.pid) - operatorBefore;
    const redisCpu = cpuSeconds(redisPid) - redisBefore;
    const window = {
      operatorCpu: Number(operatorCpu.toFixed(2)),
      redisCpu: Number(redisCpu.toFixed(2)),
      total: Number((operatorCpu + redisCpu).toFixed(2)),
      rssMiB: processRssMiB(operator.child.pid, 1),
      requests: Object.values(requests).reduce((a, b) => a + b, 0),
    };
    progress(`  ${JSON.stringify(window)}`);
    windows.push(window);
  }
  const rest = {
    seconds: SECONDS,
    cpuSeconds: summary(
      windows.map((w) => w.total),
      2,
    ),
    operatorCpuSeconds: summary(
      windows.map((w) => w.operatorCpu),
      2,
    ),
    redisCpuSeconds: summary(
      windows.map((w) => w.redisCpu),
      2,
    ),
    rssMiB: summary(
      windows.map((w) => w.rssMiB),
      1,
    ),
    redisRssMiB: processRssMiB(redisPid, 1),
    apiRequests: summary(windows.map((w) => w.requests)),
    apiRequestsLastWindow: requestsByKind,
    goals: { cpuSeconds: GOALS.restCpuSeconds, rssMiB: GOALS.rssMiB },
  };

  // A member on its own volume loses its pod.
  await createCluster(clients, NS, "vol", {
    size: 3,
    pod: {
      persistentVolumeClaimSpec: {
        accessModes: ["ReadWriteOnce"],
        resources: { requests: { storage: "1Gi" } },
      },
    },
  });
  await waitReady(clients, NS, "vol", 3);
  const healMs: number[] = [];
  for (let run = 1; run <= RUNS; run++) {
    const pod = await followerPod("vol");
    const old = await core.readNamespacedPod({ namespace: NS, name: pod });
    const started = performance.now();
    await deletePod(pod);
    await waitFor(
      `${pod} healthy on its volume`,
      async () => {
        const now = await core.readNamespacedPod({ namespace: NS, name: pod }).catch(() => undefined);
        const ip = now?.status?.podIP;
        if (!now || now.metadata?.uid === old.metadata?.uid || !ip) return undefined;
        const health = await fetch(`http://${ip}:2379/health`, { signal: AbortSignal.timeout(500) })
          .then((r) => r.json() as Promise<{ health?: string }>)
          .catch(() => undefined);
        return health?.health === "true" ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 10 },
    );
    healMs.push(performance.now() - started);
    progress(`heal on a volume ${run}/${RUNS}: ${Math.round(healMs[healMs.length - 1] ?? 0)} ms`);
    await waitReady(clients, NS, "vol", 3);
  }

  const result = {
    scenario: "rest",
    build: build.build,
    reconcileIntervalMs: defaults.reconcileIntervalMs,
    fullLookIntervalMs: defaults.fullLookIntervalMs,
    setup:
      `one \`--role all\` process (${build.build}) with every setting at its default (a look every ` +
      `${defaults.reconcileIntervalMs / 1000} s, a full look every ${defaults.fullLookIntervalMs / 1000} s), ` +
      `LOG_LEVEL info, beside the local control plane's Redis (1 Hz); windows of ${SECONDS} s, 30 s after the rounds`,
    round: { first: firstRound, warm: warmRound, goal: GOALS.roundCpuSeconds },
    rest,
    healOnVolumeMs: { ...summary(healMs), goal: GOALS.healOnVolumeMs },
    loadavg: load(),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);
  if (values.save) progress(`saved ${saveResults("rest", "rest", "process kubelet", [result])}`);
} finally {
  await operator.kill();
  keepLogs(cluster.dir, progress);
  await cluster.stop();
}

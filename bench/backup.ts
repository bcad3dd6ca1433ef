// Benchmark: backup throughput and restore time, against references measured in the same run.
//   node bench/backup.ts [--gib N] [--runs R] [--size S] [--store s3|abs|gcs] [--backup-only] [--save]
// One JSON object per scenario on stdout (progress on stderr), each with every run's figures, the
// median and spread, the ratio of the medians, the goal and the machine's load:
//   backup:  an EtcdBackup of an N GiB keyspace to the local S3-compatible store (versitygw), or
//            with --store to Azurite (abs) or fake-gcs-server (gcs), from the request to the status
//            saying it succeeded; the backup worker's RSS growth.
//            reference: `etcdctl snapshot save` of the same member to a local file (goal: our
//            throughput ≥ 0.8 of it, i.e. time ratio ≤ 1.25).
//            bound: the same bytes uploaded from a local file straight into the store (our
//            uploader, no etcd), i.e. what the store alone allows.
//   restore: an EtcdRestore of that backup into the size-S cluster (deleted and created again),
//            from the request to S members answering `etcdctl endpoint health` (as the reference is
//            timed) with the restored data.
//            reference, by hand: download the object, `etcdutl snapshot restore` one data dir per
//            member (in parallel), start S etcd processes, until `etcdctl endpoint health` passes
//            on all of them (goal: ratio ≤ 1.5).
// Each scenario also reports the CPU seconds it cost: the whole machine's, the store's and the
// worker's, for saying what bounds a figure on these cores.
// Runs against the local control plane with the operator as processes (watcher, scheduler,
// worker), as deployed; never part of the default tests.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createReadStream, createWriteStream, mkdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { parseArgs, promisify } from "node:util";
import { ensureAssets, etcdForMinor } from "../infra/local/assets.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import {
  createBackup,
  createRestore,
  deleteCustom,
  fillKeyspace,
  startClusterWithStore,
  waitBackupOutcome,
  waitRestore,
} from "../tests/helpers/backups.ts";
import {
  createCluster,
  deleteCluster,
  etcdClient,
  memberEndpoints,
  waitReady,
} from "../tests/helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "../tests/helpers/operator-processes.ts";
import { operatorBuild } from "./operator-entry.ts";
import { saveResults } from "./results.ts";
import {
  keepLogs,
  load,
  machineBusySeconds,
  processCpuSeconds,
  ratio,
  summary,
  warmMachineMemory,
} from "./stats.ts";
import { BENCH_STORES, benchStore, isBenchStore } from "./stores.ts";

const { values } = parseArgs({
  options: {
    gib: { type: "string", default: "1" },
    runs: { type: "string", default: "3" },
    size: { type: "string", default: "3" },
    // Measure backups only (no restore rounds): a quicker loop while working on the backup path.
    "backup-only": { type: "boolean", default: false },
    store: { type: "string", default: "s3" },
    // Also write the figures to bench/results/backup.json (see bench/results.ts).
    save: { type: "boolean", default: false },
  },
});
const backupOnly = values["backup-only"];
const storeKind = values.store;
if (!isBenchStore(storeKind)) throw new Error(`--store ${storeKind}: use one of ${BENCH_STORES.join(", ")}`);
const bytes = Number(values.gib) * 1024 ** 3;
const runs = Number(values.runs);
const size = Number(values.size);
const NS = "default";
const NAME = "bench";
const VERSION_36 = newestPatchOf("3.6") ?? "";
const progress = (line: string) => process.stderr.write(`${new Date().toISOString()} ${line}\n`);
const run = promisify(execFile);
const mb = (n: number) => n / 1024 / 1024;
const seconds = (since: number) => (performance.now() - since) / 1000;

warmMachineMemory(progress);
const operator = await operatorBuild(progress);
const { local: cluster, clients: c } = await startClusterWithStore({
  name: "bench-backup",
  bucket: "unused",
  log: () => {},
});
const { core } = c;
const bench = await benchStore(storeKind, cluster, c, "bench");
const quiet = { LOG_LEVEL: "info" };
const processes: OperatorProcess[] = [
  startOperatorProcess(cluster, "watcher", quiet, operator.entry),
  startOperatorProcess(cluster, "scheduler", quiet, operator.entry),
];
const worker = startOperatorProcess(cluster, "worker", quiet, operator.entry);
processes.push(worker);
const { store } = bench;
const etcd = etcdForMinor(await ensureAssets({ log: () => {} }), "3.6");
const scratch = join(tmpdir(), `bench-backup-${process.pid}`);
mkdirSync(scratch, { recursive: true });

function rssMiB(pid: number | undefined): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match?.[1] ?? 0) / 1024;
}

/** `etcdctl snapshot save` of one member to a local file: the backup's reference. */
async function referenceSnapshot(file: string): Promise<number> {
  const [endpoint] = await memberEndpoints(c, NS, NAME);
  const started = performance.now();
  await run(etcd.etcdctl, ["--endpoints", endpoint ?? "", "snapshot", "save", file]);
  return seconds(started);
}

/**
 * Our uploader from a local file straight into the store: what the store alone allows. The size is
 * given, as a backup knows it from etcd's first snapshot message.
 */
async function storeOnly(file: string, key: string): Promise<number> {
  const size = statSync(file).size;
  const started = performance.now();
  await store.upload(key, createReadStream(file), size);
  return seconds(started);
}

/** An EtcdBackup from request to success, sampling the worker's RSS meanwhile. */
async function operatorBackup(name: string, key: string) {
  const pid = worker.child.pid;
  const baseline = rssMiB(pid);
  let peak = baseline;
  const sampler = setInterval(() => {
    peak = Math.max(peak, rssMiB(pid));
  }, 50);
  const started = performance.now();
  try {
    await createBackup(c, NS, name, {
      etcdEndpoints: [`http://${NAME}-client:2379`],
      ...bench.spec(key),
    });
    // Polled every 50 ms: the figure is the operator's, not the poll's.
    const status = await waitBackupOutcome(c, NS, name, { timeoutMs: 1_800_000, intervalMs: 50 });
    if (!status.succeeded) throw new Error(`backup failed: ${status.reason}`);
    return { seconds: seconds(started), bytes: status.backupSize ?? 0, rssGrowthMiB: peak - baseline };
  } finally {
    clearInterval(sampler);
  }
}

/** Whether every endpoint answers `etcdctl endpoint health` now. */
async function isHealthy(endpoints: string[]): Promise<boolean> {
  try {
    await run(etcd.etcdctl, ["--endpoints", endpoints.join(","), "endpoint", "health"], { timeout: 5_000 });
    return true;
  } catch {
    return false;
  }
}

/** Resolves once every endpoint answers `etcdctl endpoint health`. */
async function waitHealthy(endpoints: string[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await isHealthy(endpoints))) {
    if (Date.now() > deadline) throw new Error("the hand-restored members never got healthy");
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The client endpoints of the named pods whose etcd container runs. */
async function runningEndpoints(names: readonly string[]): Promise<string[]> {
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${NAME}` });
  return pods.items
    .filter((pod) => names.includes(pod.metadata?.name ?? ""))
    .filter((pod) => pod.status?.containerStatuses?.some((s) => s.name === "etcd" && s.state?.running))
    .flatMap((pod) => (pod.status?.podIP ? [`http://${pod.status.podIP}:2379`] : []));
}

/** What a piece of work cost in CPU: the whole machine's, and the store's and the worker's share. */
interface CpuUse {
  machine: number;
  store: number;
  worker: number;
}

function cpuCounters(): CpuUse {
  return {
    machine: machineBusySeconds(),
    store: processCpuSeconds(bench.pid),
    worker: processCpuSeconds(worker.child.pid),
  };
}

function cpuSince(before: CpuUse): CpuUse {
  const after = cpuCounters();
  const spent = (key: keyof CpuUse) => Number((after[key] - before[key]).toFixed(1));
  return { machine: spent("machine"), store: spent("store"), worker: spent("worker") };
}

/** Median and spread of each CPU figure over the runs. */
function cpuSummary(uses: readonly CpuUse[]): Record<keyof CpuUse, ReturnType<typeof summary>> {
  const of = (key: keyof CpuUse) =>
    summary(
      uses.map((u) => u[key]),
      1,
    );
  return { machine: of("machine"), store: of("store"), worker: of("worker") };
}

/**
 * Times `work` with the CPU it cost. Dirty pages are flushed first (`sync`, not timed): etcdctl
 * fsyncs its file, the store does not, so without it each phase paid for the writeback of the GiB
 * the phase before had written (a backup for the store-only upload's, the next reference for the
 * backup's), which only widened the spread.
 */
async function withCpu<T>(work: () => Promise<T>): Promise<{ value: T; cpu: CpuUse }> {
  await run("sync", []);
  const before = cpuCounters();
  const value = await work();
  return { value, cpu: cpuSince(before) };
}

/**
 * A restore by hand, as the etcd docs describe it: fetch the object, `etcdutl snapshot restore`
 * a data dir per member with the new cluster's membership, start the members.
 */
async function manualRestore(key: string, round: number): Promise<number> {
  const dir = join(scratch, `manual-${round}`);
  mkdirSync(dir, { recursive: true });
  const base = 24_000 + round * 10;
  const members = Array.from({ length: size }, (_, i) => ({
    name: `m${i}`,
    client: `http://127.0.0.1:${base + 2 * i}`,
    peer: `http://127.0.0.1:${base + 2 * i + 1}`,
    dataDir: join(dir, `m${i}`),
  }));
  const initialCluster = members.map((m) => `${m.name}=${m.peer}`).join(",");
  const children: ChildProcess[] = [];
  const started = performance.now();
  try {
    const file = join(dir, "backup.db");
    await pipeline(await store.download(key), createWriteStream(file));
    await Promise.all(
      members.map((m) =>
        run(etcd.etcdutl, [
          "snapshot",
          "restore",
          file,
          "--name",
          m.name,
          "--initial-cluster",
          initialCluster,
          "--initial-advertise-peer-urls",
          m.peer,
          "--data-dir",
          m.dataDir,
        ]),
      ),
    );
    for (const m of members) {
      children.push(
        spawn(
          etcd.etcd,
          [
            "--name",
            m.name,
            "--data-dir",
            m.dataDir,
            "--listen-client-urls",
            m.client,
            "--advertise-client-urls",
            m.client,
            "--listen-peer-urls",
            m.peer,
            "--initial-advertise-peer-urls",
            m.peer,
            "--initial-cluster",
            initialCluster,
          ],
          { stdio: "ignore" },
        ),
      );
    }
    await waitHealthy(
      members.map((m) => m.client),
      300_000,
    );
    return seconds(started);
  } finally {
    for (const child of children) child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The cluster deleted and created again empty, then an EtcdRestore until `size` members serve. */
async function operatorRestore(key: string): Promise<{
  completed: number;
  serving: number;
  unavailable: number;
  cpu: CpuUse;
  phases: Record<string, number>;
  etcdStartedSeconds: number[];
  initContainers: Record<string, [number, number][]>;
}> {
  await deleteCustom(c, NS, "etcdrestores", NAME).catch(() => undefined);
  await deleteCluster(c, NS, NAME, 120_000);
  await createCluster(c, NS, NAME, { size, version: VERSION_36 });
  await waitReady(c, NS, NAME, size, 300_000);
  const cpuBefore = cpuCounters();
  const started = performance.now();
  // The pods' timestamps are wall-clock: taken from the same moment as `started`.
  const startedWall = Date.now();
  const { storageType, ...section } = bench.spec(key);
  await createRestore(c, NS, NAME, { backupStorageType: storageType, ...section });
  // Where the time goes: when each phase was first seen (polled every 100 ms), and when the seed
  // pods' etcd containers started (their init containers fetched and restored the backup before).
  // Serving is timed as the reference is: when every restored member answers `etcdctl endpoint
  // health` (the pods' Ready condition follows up to a readiness period later).
  const phases: Record<string, number> = {};
  let servingAt: number | undefined;
  let watching = true;
  const phaseWatch = (async () => {
    while (watching) {
      const status = (await c.kube.getRestore(NS, NAME))?.status;
      const phase = status?.phase;
      if (phase && phases[phase] === undefined) phases[phase] = Number(seconds(started).toFixed(2));
      const seeds = status?.seedMembers ?? [];
      if (servingAt === undefined && seeds.length === size) {
        const endpoints = await runningEndpoints(seeds);
        if (endpoints.length === size && (await isHealthy(endpoints))) servingAt = seconds(started);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  let completed = Number.NaN;
  try {
    await waitRestore(c, NS, NAME, "Completed", 1_800_000);
    completed = seconds(started);
    while (servingAt === undefined && seconds(started) - completed < 300)
      await new Promise((r) => setTimeout(r, 100));
  } finally {
    watching = false;
    await phaseWatch;
  }
  const cpu = cpuSince(cpuBefore);
  const serving = servingAt ?? Number.NaN;
  await waitReady(c, NS, NAME, size, 1_800_000);
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${NAME}` });
  const etcdStartedSeconds = pods.items
    .map((p) => p.status?.containerStatuses?.find((s) => s.name === "etcd")?.state?.running?.startedAt)
    .filter((at): at is Date => at !== undefined)
    .map((at) => Number(((new Date(at).getTime() - startedWall) / 1000).toFixed(1)))
    .sort((a, b) => a - b);
  // Each seed's init containers (fetch, etcdutl restore, install): when each ran, from the request.
  const at = (time: Date | string | undefined) =>
    time === undefined ? Number.NaN : Number(((new Date(time).getTime() - startedWall) / 1000).toFixed(1));
  const initContainers: Record<string, [number, number][]> = {};
  for (const pod of pods.items) {
    for (const status of pod.status?.initContainerStatuses ?? []) {
      const ran = status.state?.terminated;
      if (!ran) continue;
      initContainers[status.name] = [
        ...(initContainers[status.name] ?? []),
        [at(ran.startedAt), at(ran.finishedAt)],
      ];
    }
  }
  progress(
    `restore trace: phases first seen at ${JSON.stringify(phases)} s; init containers ${JSON.stringify(initContainers)}; etcd started at ${etcdStartedSeconds.join(", ")} s`,
  );
  // Staged, the old members serve until Replacing: the cluster is without service from then on.
  const unavailable = Number((serving - (phases.Replacing ?? 0)).toFixed(2));
  return { completed, serving, unavailable, cpu, phases, etcdStartedSeconds, initContainers };
}

const loadBefore = load();
const figures = {
  reference: [] as number[],
  storeOnly: [] as number[],
  backup: [] as number[],
  rssGrowthMiB: [] as number[],
  restore: [] as number[],
  restoreCompleted: [] as number[],
  restoreUnavailable: [] as number[],
  restoreTraces: [] as {
    phases: Record<string, number>;
    etcdStartedSeconds: number[];
    initContainers: Record<string, [number, number][]>;
  }[],
  manualRestore: [] as number[],
  cpu: {
    reference: [] as CpuUse[],
    storeOnly: [] as CpuUse[],
    backup: [] as CpuUse[],
    manualRestore: [] as CpuUse[],
    restore: [] as CpuUse[],
  },
};
let snapshotBytes = 0;
let backupBytes = 0;
try {
  await createCluster(c, NS, NAME, { size, version: VERSION_36 });
  await waitReady(c, NS, NAME, size, 300_000);
  const client = await etcdClient(c, NS, NAME);
  await fillKeyspace(client, bytes, (written) => progress(`filled ${mb(written)} MiB`));
  client.close();

  for (let round = 0; round < runs; round++) {
    const file = join(scratch, "reference.db");
    const reference = await withCpu(() => referenceSnapshot(file));
    figures.reference.push(reference.value);
    figures.cpu.reference.push(reference.cpu);
    snapshotBytes = statSync(file).size;
    const alone = await withCpu(() => storeOnly(file, `store-only-${round}.db`));
    figures.storeOnly.push(alone.value);
    figures.cpu.storeOnly.push(alone.cpu);
    rmSync(file);
    const backed = await withCpu(() => operatorBackup(`bench-backup-${round}`, `bench-${round}.db`));
    const backup = backed.value;
    figures.cpu.backup.push(backed.cpu);
    backupBytes = backup.bytes;
    figures.backup.push(backup.seconds);
    figures.rssGrowthMiB.push(backup.rssGrowthMiB);
    progress(
      `run ${round + 1}/${runs}: etcdctl ${figures.reference.at(-1)?.toFixed(1)} s, store alone ${figures.storeOnly.at(-1)?.toFixed(1)} s, backup ${backup.seconds.toFixed(1)} s`,
    );
    if (backupOnly) continue;
    const manual = await withCpu(() => manualRestore(`bench-${round}.db`, round));
    figures.manualRestore.push(manual.value);
    figures.cpu.manualRestore.push(manual.cpu);
    const restored = await operatorRestore(`bench-${round}.db`);
    figures.cpu.restore.push(restored.cpu);
    figures.restore.push(restored.serving);
    figures.restoreCompleted.push(restored.completed);
    figures.restoreUnavailable.push(restored.unavailable);
    figures.restoreTraces.push({
      phases: restored.phases,
      etcdStartedSeconds: restored.etcdStartedSeconds,
      initContainers: restored.initContainers,
    });
    progress(
      `run ${round + 1}/${runs}: restore by hand ${figures.manualRestore.at(-1)?.toFixed(1)} s, operator ${restored.serving.toFixed(1)} s`,
    );
  }
  const loadAfter = load();
  const backup = summary(figures.backup, 2);
  const reference = summary(figures.reference, 2);
  const storeAlone = summary(figures.storeOnly, 2);
  const results: Record<string, unknown>[] = [];
  results.push({
    scenario: "backup",
    operatorBuild: operator.build,
    runs,
    bytes: backupBytes,
    seconds: backup,
    MiBps: Number((mb(backupBytes) / backup.median).toFixed(1)),
    workerRssGrowthMiB: summary(figures.rssGrowthMiB, 1),
    cores: availableParallelism(),
    cpuSeconds: cpuSummary(figures.cpu.backup),
    reference: {
      what: "etcdctl snapshot save to local disk",
      bytes: snapshotBytes,
      seconds: reference,
      cpuSeconds: cpuSummary(figures.cpu.reference),
      MiBps: Number((mb(snapshotBytes) / reference.median).toFixed(1)),
    },
    ratio: ratio(backup.median, reference.median),
    goal: { ratioAtMost: 1.25, throughputShareAtLeast: 0.8, rssGrowthMiBAtMost: 64 },
    bound: {
      what: "the same bytes from a local file into the store with our uploader (no etcd)",
      seconds: storeAlone,
      cpuSeconds: cpuSummary(figures.cpu.storeOnly),
      MiBps: Number((mb(snapshotBytes) / storeAlone.median).toFixed(1)),
      backupOverStore: ratio(backup.median, storeAlone.median),
    },
    loadavg: { before: loadBefore, after: loadAfter },
  });
  if (!backupOnly) {
    const restore = summary(figures.restore, 2);
    const manual = summary(figures.manualRestore, 2);
    results.push({
      scenario: "restore",
      operatorBuild: operator.build,
      runs,
      size,
      bytes: backupBytes,
      secondsToServing: restore,
      secondsToCompleted: summary(figures.restoreCompleted, 2),
      secondsWithoutService: {
        what: "from the old members' stop (phase Replacing first seen) to every restored member healthy; the old members serve before",
        ...summary(figures.restoreUnavailable, 2),
      },
      cores: availableParallelism(),
      cpuSeconds: cpuSummary(figures.cpu.restore),
      trace: {
        what: "seconds from the request: each phase first seen, and each member's etcd container start",
        runs: figures.restoreTraces,
      },
      reference: {
        what: `by hand: download, etcdutl snapshot restore ×${size} in parallel, start ${size} etcd, endpoint health`,
        seconds: manual,
        cpuSeconds: cpuSummary(figures.cpu.manualRestore),
      },
      ratio: ratio(restore.median, manual.median),
      goal: { ratioAtMost: 1.5 },
      loadavg: { before: loadBefore, after: loadAfter },
    });
  }
  for (const r of results) console.log(JSON.stringify(r));
  if (values.save) {
    const store = {
      s3: "",
      abs: "Azure Blob Storage (Azurite)",
      gcs: "Google Cloud Storage (fake-gcs-server)",
    }[storeKind];
    const shape = [values.gib === "1" ? "" : `${values.gib} GiB`, size === 3 ? "" : `size ${size}`]
      .filter(Boolean)
      .join(", ");
    const variant = [store, shape].filter(Boolean).join(", ");
    const file = storeKind === "s3" ? "backup" : `backup-${storeKind}`;
    progress(`saved ${saveResults(file, "backup", variant, results)}`);
  }
} finally {
  for (const p of processes) await p.kill("SIGTERM");
  store.close();
  await bench.stop();
  rmSync(scratch, { recursive: true, force: true });
  keepLogs(cluster.dir, progress);
  await cluster.stop();
}

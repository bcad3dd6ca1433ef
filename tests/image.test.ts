// The operator's image, built from the repository's Dockerfile with buildah (infra/image/build.ts,
// cached: rebuilt only when the build context changed), and run as a container with buildah
// (chroot isolation, the host's network): its layout is the Dockerfile's (distroless: no shell, no
// package manager; user 65532; production dependencies only), and the operator it runs takes a
// 3-member cluster through create, a lost member and a clean SIGTERM against the local control
// plane. What a bundle or the production node_modules lack, or the base's libraries, fails here.
// Then the images of what a cluster here runs besides the operator (infra/image/cluster-images.ts):
// etcd of each minor with nothing but its binaries, serving when run, and busybox with its applets.
import { type ChildProcess, spawn } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import { Redis } from "ioredis";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { buildOperatorImage } from "../infra/image/build.ts";
import { projectBuildah } from "../infra/image/buildah.ts";
import { buildClusterImages, REDIS_IMAGE } from "../infra/image/cluster-images.ts";
import { cacheRoot, ensureAssets } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { freePort } from "../infra/local/daemons.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { Kube } from "../shared/kube.ts";
import { createCluster, etcdClient, waitReady } from "./helpers/clusters.ts";
import { operatorEnv } from "./helpers/operator-processes.ts";
import { ROOT } from "./helpers/packaging.ts";

const NS = "default";
const image = await buildOperatorImage({ progress: (line) => t.comment(line) });
const buildah = await projectBuildah(cacheRoot());

interface ImageConfig {
  User?: string;
  Entrypoint?: string[];
  Cmd?: string[];
  Env?: string[];
  WorkingDir?: string;
}

const inspected = JSON.parse(
  await buildah.run(["inspect", "--type", "image", image.name], { quiet: true }),
) as {
  OCIv1: { config: ImageConfig };
};
const config = inspected.OCIv1.config;
const container = await buildah.run(["from", "--quiet", "--pull=never", image.name], { quiet: true });
t.teardown(() => buildah.run(["rm", container], { quiet: true }).catch(() => undefined));

t.test("the image is laid out as the Dockerfile says", async (t) => {
  const dockerfile = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  const entrypoint = /^ENTRYPOINT (.+)$/m.exec(dockerfile)?.[1] ?? "";
  t.same(config.Entrypoint, JSON.parse(entrypoint), "the Dockerfile's ENTRYPOINT");
  t.same(config.Cmd, ["--role", "all"]);
  t.equal(config.User, "65532:65532", "runs as distroless's nonroot user");
  t.equal(config.WorkingDir, "/app");
  for (const env of ["NODE_ENV=production", "MALLOC_ARENA_MAX=2", "MALLOC_MMAP_THRESHOLD_=131072"])
    t.ok(config.Env?.includes(env), env);
  t.notOk(
    config.Env?.some((e) => e.startsWith("NODE_EXTRA_CA_CERTS=")),
    "nothing of the build stages' environment",
  );
  const root = await buildah.run(["mount", container], { quiet: true });
  t.teardown(() => buildah.run(["umount", container], { quiet: true }).catch(() => undefined));
  t.ok(existsSync(join(root, "nodejs/bin/node")), "node");
  t.ok(existsSync(join(root, "app/dist/operator.js")), "the bundle");
  t.ok(
    existsSync(join(root, "app/dist/native/malloc-trim.node")),
    "the malloc_trim addon, built in the image",
  );
  t.ok(existsSync(join(root, "app/infra/restore-init.ts")), "the sources the restore init containers run");
  t.ok(
    existsSync(join(root, "app/infra/redis-sentinel-init.ts")),
    "and the one the bundled Redis Sentinel's init container runs",
  );
  t.ok(existsSync(join(root, "app/node_modules/bullmq")), "production dependencies");
  for (const absent of [
    "bin/sh",
    "bin/bash",
    "usr/bin/apt-get",
    "app/node_modules/esbuild",
    "app/node_modules/typescript",
    "app/node_modules/@kubernetes/client-node",
    "app/infra/local",
    "app/tests",
  ])
    t.notOk(existsSync(join(root, absent)), `no ${absent}`);
  t.comment(
    `image ${image.size} (${(image.compressedBytes / 1024 / 1024).toFixed(1)} MiB compressed), base ${image.baseSize}`,
  );
});

/** Runs the image's entrypoint with `args` in the container, as a process group of its own. */
function runImage(
  args: string[],
  env: Record<string, string>,
  volumes: string[],
  logFile: string,
): ChildProcess {
  const out = openSync(logFile, "a");
  const flags = [
    ...Object.entries(env).flatMap(([name, value]) => ["--env", `${name}=${value}`]),
    ...volumes.flatMap((v) => ["--volume", v]),
  ];
  const [command, ...rest] = buildah.argv([
    "run",
    "--isolation",
    "chroot",
    ...flags,
    container,
    "--",
    ...(config.Entrypoint ?? []),
    ...args,
  ]);
  return spawn(command ?? "buildah", rest, { stdio: ["ignore", out, out], detached: true });
}

/** The pid of the operator's node process inside the container (a child of buildah's). */
function operatorPid(): number | undefined {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (argv[0] === "/nodejs/bin/node" && argv.includes("dist/operator.js")) return Number(entry);
    } catch {
      // Gone while we looked.
    }
  }
  return undefined;
}

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.once("exit", (code) => resolve(code));
  });
}

t.test("a role the image does not know is refused with the list of roles", async (t) => {
  const dir = join(ROOT, "node_modules", ".cache");
  mkdirSync(dir, { recursive: true });
  const log = join(dir, "image-test-role.log");
  writeFileSync(log, "");
  const child = runImage(["--role", "nope"], {}, [], log);
  t.not(await exited(child), 0, "exits non-zero");
  t.match(readFileSync(log, "utf8"), /--role must be one of all, watcher, worker, scheduler, http/);
});

t.test("the operator in the image runs a cluster: create, a lost member replaced, SIGTERM", async (t) => {
  const local = await startLocalCluster({ name: "e2e-image" });
  t.teardown(() => local.stop());
  const { kc, core } = clientsFor(local.kubeconfigPath);
  await installCrds(kc);
  const c = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
  // The image's user (65532) reads the kubeconfig through the volume.
  const kubeconfig = join(local.dir, "kubeconfig-for-image");
  copyFileSync(local.kubeconfigPath, kubeconfig);
  chmodSync(kubeconfig, 0o644);
  const { PATH: _path, HOME: _home, ...env } = operatorEnv(local, { KUBECONFIG: "/etc/operator/kubeconfig" });
  const operator = runImage(
    ["--role", "all"],
    env,
    [`${kubeconfig}:/etc/operator/kubeconfig:ro`],
    join(local.dir, "image-operator.log"),
  );
  t.teardown(() => {
    if (operator.exitCode === null && operator.pid) process.kill(-operator.pid, "SIGKILL");
  });

  await createCluster(c, NS, "from-image", { size: 3, version: "3.6.16" });
  await waitReady(c, NS, "from-image", 3, 120_000);
  const etcd = await etcdClient(c, NS, "from-image");
  await etcd.put("kept").value("by the image's operator");
  etcd.close();
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=from-image" });
  const lost = pods.items[0]?.metadata?.name ?? "";
  await core.deleteNamespacedPod({ namespace: NS, name: lost });
  await waitFor(
    `${lost} replaced`,
    async () => {
      const now = await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=from-image" });
      const names = now.items.filter((p) => !p.metadata?.deletionTimestamp).map((p) => p.metadata?.name);
      return names.length === 3 && !names.includes(lost) ? true : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );
  await waitReady(c, NS, "from-image", 3, 120_000);
  const after = await etcdClient(c, NS, "from-image");
  t.equal(await after.get("kept").string(), "by the image's operator", "the data outlived the lost member");
  after.close();

  // SIGTERM to the operator itself, as the kubelet's runtime sends it to a container's process.
  const pid = operatorPid();
  if (pid === undefined) throw new Error("the operator's process in the container was not found");
  process.kill(pid, "SIGTERM");
  t.equal(await exited(operator), 0, "SIGTERM stops it cleanly (buildah run passes its exit code on)");
  const log = readFileSync(join(local.dir, "image-operator.log"), "utf8");
  t.match(log, /shutting down/, "it said so");
});

t.test(
  "etcd images hold etcd's binaries and nothing else, and serve when run; busybox has its applets",
  async (t) => {
    const { etcd } = await ensureAssets({ only: ["etcd"], log: (line) => t.comment(line) });
    const images = await buildClusterImages(buildah, { etcd }, (line) => t.comment(line));
    t.same(
      images.map((i) => i.name),
      [
        ...etcd.map((b) => `quay.io/coreos/etcd:v${b.version}`),
        "docker.io/library/busybox:1.28.0-glibc",
        REDIS_IMAGE,
      ],
      "an etcd image per minor built, busybox and Redis, under the names the operator and chart use",
    );
    for (const i of images) t.ok(existsSync(i.archive), `${i.name}: ${i.archive}`);

    const newest = etcd.at(-1);
    if (!newest) throw new Error("no etcd build");
    const etcdImage = `quay.io/coreos/etcd:v${newest.version}`;
    const box = await buildah.run(["from", "--quiet", "--pull=never", etcdImage], { quiet: true });
    t.teardown(() => buildah.run(["rm", box], { quiet: true }).catch(() => undefined));
    const root = await buildah.run(["mount", box], { quiet: true });
    for (const binary of ["etcd", "etcdctl", "etcdutl"])
      t.ok(existsSync(join(root, "usr/local/bin", binary)), `${binary} in /usr/local/bin`);
    for (const absent of ["bin/sh", "bin/busybox", "usr/bin/env"])
      t.notOk(existsSync(join(root, absent)), `no ${absent}`);
    await buildah.run(["umount", box], { quiet: true });

    const [client, peer] = [await freePort(), await freePort()];
    const name = "image-test-etcd";
    const logFile = join(ROOT, "node_modules", ".cache", "image-test-etcd.log");
    mkdirSync(join(ROOT, "node_modules", ".cache"), { recursive: true });
    writeFileSync(logFile, "");
    const [command, ...rest] = buildah.argv([
      "run",
      "--isolation",
      "chroot",
      box,
      "--",
      "/usr/local/bin/etcd",
      `--name=${name}`,
      "--data-dir=/tmp/data",
      `--listen-client-urls=http://127.0.0.1:${client}`,
      `--advertise-client-urls=http://127.0.0.1:${client}`,
      `--listen-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
      `--initial-cluster=${name}=http://127.0.0.1:${peer}`,
    ]);
    const out = openSync(logFile, "a");
    const server = spawn(command ?? "buildah", rest, { stdio: ["ignore", out, out], detached: true });
    t.teardown(() => {
      if (server.exitCode === null && server.pid) process.kill(-server.pid, "SIGKILL");
    });
    const etcdClient = new Etcd3({ hosts: [`http://127.0.0.1:${client}`] });
    await waitFor("etcd in its image to serve", async () => {
      await etcdClient.put("from").value("the image");
      return true;
    });
    t.equal(await etcdClient.get("from").string(), "the image", "etcd in the image serves");
    t.equal((await etcdClient.maintenance.status()).version, newest.version, "the version its tag names");
    etcdClient.close();
    if (server.pid) process.kill(-server.pid, "SIGTERM");
    await exited(server);

    const busybox = await buildah.run(["from", "--quiet", "--pull=never", "busybox:1.28.0-glibc"], {
      quiet: true,
    });
    t.teardown(() => buildah.run(["rm", busybox], { quiet: true }).catch(() => undefined));
    const applets = await buildah.run(
      [
        "run",
        "--isolation",
        "chroot",
        busybox,
        "--",
        "/bin/sh",
        "-c",
        'for a in nslookup sleep date tee; do [ -x "/bin/$a" ] && echo "/bin/$a"; done; sleep 0.1 && date +%s >/dev/null && echo done',
      ],
      { quiet: true },
    );
    t.same(
      applets.split("\n"),
      ["/bin/nslookup", "/bin/sleep", "/bin/date", "/bin/tee", "done"],
      "what check-dns runs is there",
    );
  },
);

t.test(
  "the Redis image serves with the args the chart gives it and answers its readiness probe",
  async (t) => {
    const { etcd } = await ensureAssets({ only: ["etcd"], log: (line) => t.comment(line) });
    await buildClusterImages(buildah, { etcd }, (line) => t.comment(line));
    const redisConfig = (
      JSON.parse(await buildah.run(["inspect", "--type", "image", REDIS_IMAGE], { quiet: true })) as {
        OCIv1: { config: ImageConfig };
      }
    ).OCIv1.config;
    const box = await buildah.run(["from", "--quiet", "--pull=never", REDIS_IMAGE], { quiet: true });
    t.teardown(() => buildah.run(["rm", box], { quiet: true }).catch(() => undefined));
    const port = await freePort();
    // The args of manifests/base/redis.yaml, and a port of our own (the host's network is shared).
    const args = [
      "--save",
      "",
      "--appendonly",
      "no",
      "--maxmemory-policy",
      "noeviction",
      "--port",
      String(port),
    ];
    const [command, ...rest] = buildah.argv([
      "run",
      "--isolation",
      "chroot",
      "--user",
      "999:999",
      box,
      "--",
      ...(redisConfig.Entrypoint ?? []),
      ...args,
    ]);
    const server = spawn(command ?? "buildah", rest, { stdio: "ignore", detached: true });
    t.teardown(() => {
      if (server.exitCode === null && server.pid) process.kill(-server.pid, "SIGKILL");
    });
    const redis = new Redis({ port, host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 0 });
    const pong = await waitFor("Redis in its image to answer", async () => {
      await redis.connect().catch(() => undefined);
      return await redis.ping();
    });
    t.equal(pong, "PONG");
    await redis.set("k", "v");
    t.equal(await redis.get("k"), "v", "it keeps what it is given");
    redis.disconnect();
    const probe = await buildah.run(
      ["run", "--isolation", "chroot", box, "--", "redis-cli", "-p", String(port), "ping"],
      {
        quiet: true,
      },
    );
    t.equal(probe, "PONG", "redis-cli ping, the readiness probe, answers");
    if (server.pid) process.kill(-server.pid, "SIGTERM");
    await exited(server);
  },
);

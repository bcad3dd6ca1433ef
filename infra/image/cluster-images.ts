// Images of what a cluster here runs besides the operator, made from what the project builds or
// Debian ships, under the names the operator, chart and manifests use (nothing can be pulled):
//   quay.io/coreos/etcd:v<version>          etcd, etcdctl and etcdutl of each minor we build and
//                                           nothing else: no shell, like the official distroless
//                                           etcd images, so a pod that assumes one fails here too
//   docker.io/library/busybox:1.28.0-glibc  the check-dns init container's default image: busybox
//                                           built from Debian's source, static with glibc, its
//                                           nslookup on libc's resolver as in 1.28
//   docker.io/library/redis:7.4-alpine      the chart's and manifests' bundled Redis: Debian's
//                                           redis-server and redis-cli with their libraries; like
//                                           the official image, protected mode off and the
//                                           container's args passed to redis-server
// and for real nodes:
//   registry.k8s.io/pause:<version>         the pod sandbox: Kubernetes's static pause binary
//   registry.k8s.io/coredns/coredns:v<ver>  the cluster DNS: our CoreDNS build, user 65532 as the
//                                           official image (a distroless base) runs it
//   docker.io/versity/versitygw:v<version>  an S3-compatible store to run in the cluster (backups
//                                           to a store that is itself a pod): our versitygw build
// Each is written as an OCI archive for `ctr images import`, and made again only when its inputs
// (the binaries, this recipe) changed.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { DEFAULT_BUSYBOX_IMAGE, DEFAULT_REPOSITORY } from "../../shared/api/etcd-cluster.ts";
import type { CorednsBuild, EtcdBuild, NodeBuild, VersitygwBuild } from "../local/assets.ts";
import { type Buildah, hasImage, pruneStorage } from "./buildah.ts";

const run = promisify(execFile);

export interface ClusterImage {
  name: string;
  archive: string;
  /** Digest of what it was made from. */
  inputs: string;
}

interface Recipe {
  name: string;
  /** What the image is made from, besides this file. */
  inputFiles: string[];
  make(buildah: Buildah, container: string, work: string): Promise<void>;
}

/** docker.io/library/<name> for a short name, as Kubernetes resolves it. */
export function fullImageName(image: string): string {
  const first = image.split("/")[0] ?? "";
  if (image.includes("/") && (first.includes(".") || first.includes(":") || first === "localhost"))
    return image;
  return image.includes("/") ? `docker.io/${image}` : `docker.io/library/${image}`;
}

/** An empty /tmp, sticky and writable by all, as images have one. */
async function tmpDir(work: string): Promise<string> {
  const dir = join(work, "rootfs-tmp");
  await mkdir(join(dir, "tmp"), { recursive: true });
  await chmod(join(dir, "tmp"), 0o1777);
  return dir;
}

function etcdRecipe(build: EtcdBuild): Recipe {
  return {
    name: `${DEFAULT_REPOSITORY}:v${build.version}`,
    inputFiles: [build.etcd, build.etcdctl, build.etcdutl],
    async make(buildah, container, work) {
      for (const binary of [build.etcd, build.etcdctl, build.etcdutl])
        await buildah.run(["add", "--chmod", "0755", container, binary, "/usr/local/bin/"], { quiet: true });
      await buildah.run(["add", container, await tmpDir(work), "/"], { quiet: true });
      // As the official images: no entrypoint, etcd as the command.
      await buildah.run(
        ["config", "--cmd", '["/usr/local/bin/etcd"]', "--port", "2379", "--port", "2380", container],
        { quiet: true },
      );
    },
  };
}

/**
 * Busybox from Debian's source of it (bookworm's 1.35.0), built static against glibc as the
 * "-glibc" image is, with nslookup on libc's resolver (FEATURE_NSLOOKUP_BIG off) as in 1.28: the
 * resolver applies the pod's DNS search path, which the operator's DNS check needs for its
 * `<pod>.<cluster>.<namespace>.svc` names. (Debian's own busybox builds have the newer internal
 * resolver, which sends a dotted name to the server as it is and fails in a cluster: the
 * reason images keep busybox 1.28.)
 */
const BUSYBOX_SOURCE = {
  url: "http://deb.debian.org/debian/pool/main/b/busybox/busybox_1.35.0.orig.tar.bz2",
  sha256: "faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694",
  dir: "busybox-1.35.0",
};

async function buildBusybox(work: string): Promise<string> {
  const response = await fetch(BUSYBOX_SOURCE.url).catch((error: unknown) => {
    throw new Error(`downloading busybox's source (${BUSYBOX_SOURCE.url}) failed`, { cause: error });
  });
  if (!response.ok) throw new Error(`downloading ${BUSYBOX_SOURCE.url}: HTTP ${response.status}`);
  const tarball = Buffer.from(await response.arrayBuffer());
  const digest = createHash("sha256").update(tarball).digest("hex");
  if (digest !== BUSYBOX_SOURCE.sha256)
    throw new Error(`${BUSYBOX_SOURCE.url} has sha256 ${digest}, not the pinned ${BUSYBOX_SOURCE.sha256}`);
  await writeFile(join(work, "busybox.tar.bz2"), tarball);
  await run("tar", ["-xjf", "busybox.tar.bz2"], { cwd: work });
  const source = join(work, BUSYBOX_SOURCE.dir);
  await run("make", ["defconfig"], { cwd: source, maxBuffer: 16 * 1024 * 1024 });
  const config = (await readFile(join(source, ".config"), "utf8"))
    .replace(/^CONFIG_FEATURE_NSLOOKUP_BIG=y$/m, "# CONFIG_FEATURE_NSLOOKUP_BIG is not set")
    .replace(/^# CONFIG_STATIC is not set$/m, "CONFIG_STATIC=y")
    // tc needs kernel headers' CBQ definitions, which newer headers dropped; no pod here needs it.
    .replace(/^CONFIG_TC=y$/m, "# CONFIG_TC is not set");
  await writeFile(join(source, ".config"), config);
  await run("sh", ["-c", 'yes "" | make oldconfig'], { cwd: source, maxBuffer: 16 * 1024 * 1024 });
  await run("make", [`-j${availableParallelism()}`], { cwd: source, maxBuffer: 64 * 1024 * 1024 }).catch(
    (error: unknown) => {
      throw new Error("building busybox failed (make and gcc are needed)", { cause: error });
    },
  );
  return join(source, "busybox");
}

const busyboxRecipe: Recipe = {
  name: fullImageName(DEFAULT_BUSYBOX_IMAGE),
  inputFiles: [],
  async make(buildah, container, work) {
    const busybox = await buildBusybox(work);
    await buildah.run(["add", "--chmod", "0755", container, busybox, "/bin/busybox"], { quiet: true });
    await buildah.run(["add", container, await tmpDir(work), "/"], { quiet: true });
    await buildah.run(
      ["run", "--isolation", "chroot", container, "--", "/bin/busybox", "--install", "-s", "/bin"],
      {
        quiet: true,
      },
    );
    await buildah.run(["config", "--cmd", '["sh"]', container], { quiet: true });
  },
};

/** The Redis image the chart and the kustomize base name (charts/etcd-operator/values.yaml). */
export const REDIS_IMAGE = "docker.io/library/redis:7.4-alpine";

const redisRecipe: Recipe = {
  name: REDIS_IMAGE,
  inputFiles: [],
  async make(buildah, container, work) {
    const root = join(work, "redis.tar");
    await run("mmdebstrap", ["--quiet", "--variant=extract", "--include=redis-server", "bookworm", root], {
      maxBuffer: 16 * 1024 * 1024,
    });
    await buildah.run(["add", container, root, "/"], { quiet: true });
    await buildah.run(["add", container, await tmpDir(work), "/"], { quiet: true });
    // /data, the working directory, owned by the official image's redis user (999).
    await mkdir(join(work, "data"));
    await buildah.run(["add", "--chown", "999:999", container, join(work, "data"), "/data"], { quiet: true });
    // The official image's build turns protected mode off (no password, reached through a
    // Service) and its entrypoint hands the container's args to redis-server.
    await buildah.run(
      [
        "config",
        "--entrypoint",
        '["/usr/bin/redis-server", "--protected-mode", "no"]',
        "--cmd",
        "[]",
        "--workingdir",
        "/data",
        "--port",
        "6379",
        container,
      ],
      { quiet: true },
    );
  },
};

/** The sandbox image containerd starts every pod with (its sandbox_image). */
export function pauseImage(node: NodeBuild): string {
  return `registry.k8s.io/pause:${node.pauseVersion}`;
}

/** An image of one static binary as its entrypoint, run as `user`; `/tmp` when the program needs one. */
function singleBinaryRecipe(image: {
  name: string;
  binary: string;
  path: string;
  user: string;
  ports?: string[];
  tmp?: boolean;
}): Recipe {
  return {
    name: image.name,
    inputFiles: [image.binary],
    async make(buildah, container, work) {
      await buildah.run(["add", "--chmod", "0755", container, image.binary, image.path], { quiet: true });
      if (image.tmp) await buildah.run(["add", container, await tmpDir(work), "/"], { quiet: true });
      const ports = (image.ports ?? []).flatMap((port) => ["--port", port]);
      await buildah.run(
        ["config", "--entrypoint", JSON.stringify([image.path]), "--user", image.user, ...ports, container],
        { quiet: true },
      );
    },
  };
}

const pauseRecipe = (node: NodeBuild) =>
  singleBinaryRecipe({ name: pauseImage(node), binary: node.pause, path: "/pause", user: "65535:65535" });

export function corednsImage(coredns: CorednsBuild): string {
  return `registry.k8s.io/coredns/coredns:v${coredns.version}`;
}

const corednsRecipe = (coredns: CorednsBuild) =>
  singleBinaryRecipe({
    name: corednsImage(coredns),
    binary: coredns.coredns,
    path: "/coredns",
    user: "65532:65532",
    ports: ["53/udp"],
  });

export function versitygwImage(versitygw: VersitygwBuild): string {
  return `docker.io/versity/versitygw:v${versitygw.version}`;
}

const versitygwRecipe = (versitygw: VersitygwBuild) =>
  singleBinaryRecipe({
    name: versitygwImage(versitygw),
    binary: versitygw.versitygw,
    path: "/usr/local/bin/versitygw",
    user: "65532:65532",
    ports: ["7070"],
    tmp: true,
  });

/** What the images are made of; the real nodes' images only when their binaries are given. */
export interface ClusterImageInputs {
  etcd: EtcdBuild[];
  node?: NodeBuild;
  coredns?: CorednsBuild;
  versitygw?: VersitygwBuild;
}

async function inputsDigest(recipe: Recipe): Promise<string> {
  const hash = createHash("sha256")
    .update(await readFile(import.meta.filename))
    .update(recipe.name);
  for (const file of recipe.inputFiles) hash.update(await readFile(file));
  return hash.digest("hex").slice(0, 16);
}

/** Makes (or finds up to date) every image a cluster here runs besides the operator's. */
export async function buildClusterImages(
  buildah: Buildah,
  inputs: ClusterImageInputs,
  progress: (line: string) => void,
): Promise<ClusterImage[]> {
  const stampFile = join(buildah.storageDir, "cluster-images.json");
  const stamps: Record<string, ClusterImage> = existsSync(stampFile)
    ? JSON.parse(await readFile(stampFile, "utf8"))
    : {};
  const images: ClusterImage[] = [];
  let made = 0;
  const recipes = [
    ...inputs.etcd.map(etcdRecipe),
    busyboxRecipe,
    redisRecipe,
    ...(inputs.node ? [pauseRecipe(inputs.node)] : []),
    ...(inputs.coredns ? [corednsRecipe(inputs.coredns)] : []),
    ...(inputs.versitygw ? [versitygwRecipe(inputs.versitygw)] : []),
  ];
  for (const recipe of recipes) {
    const digest = await inputsDigest(recipe);
    const archive = join(buildah.storageDir, `${recipe.name.replace(/[/:]/g, "_")}.oci.tar`);
    const stamp = stamps[recipe.name];
    if (stamp?.inputs === digest && existsSync(archive) && (await hasImage(buildah, recipe.name))) {
      images.push(stamp);
      continue;
    }
    const started = Date.now();
    const work = await mkdtemp(join(tmpdir(), "eop-image-"));
    const container = await buildah.run(["from", "--quiet", "scratch"], { quiet: true });
    try {
      await recipe.make(buildah, container, work);
      await buildah.run(["commit", "--quiet", container, recipe.name], { quiet: true });
      await buildah.run(["push", "--quiet", recipe.name, `oci-archive:${archive}:${recipe.name}`], {
        quiet: true,
      });
    } finally {
      await buildah.run(["rm", container], { quiet: true }).catch(() => undefined);
      await rm(work, { recursive: true, force: true });
    }
    const image = { name: recipe.name, archive, inputs: digest };
    stamps[recipe.name] = image;
    await writeFile(stampFile, `${JSON.stringify(stamps, null, 2)}\n`);
    images.push(image);
    made++;
    progress(`image: made ${recipe.name} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  // A remade image leaves the one it replaced behind, unnamed.
  if (made > 0) await pruneStorage(buildah);
  return images;
}

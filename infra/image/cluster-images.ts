// Images of what a cluster here runs besides the operator, made from what the project builds or
// Debian ships, under the names the operator, chart and manifests use (nothing can be pulled):
//   quay.io/coreos/etcd:v<version>          etcd, etcdctl and etcdutl of each minor we build and
//                                           nothing else: no shell, like the official distroless
//                                           etcd images, so a pod that assumes one fails here too
//   docker.io/library/busybox:1.28.0-glibc  the check-dns init container's default image: a static
//                                           busybox (Debian's busybox-static) with its applets
//   docker.io/library/redis:7.4-alpine      the chart's and manifests' bundled Redis: Debian's
//                                           redis-server and redis-cli with their libraries; like
//                                           the official image, protected mode off and the
//                                           container's args passed to redis-server
// Each is written as an OCI archive for `ctr images import`, and made again only when its inputs
// (the binaries, this recipe) changed.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { DEFAULT_BUSYBOX_IMAGE, DEFAULT_REPOSITORY } from "../../shared/api/etcd-cluster.ts";
import type { EtcdBuild } from "../local/assets.ts";
import { type Buildah, hasImage } from "./buildah.ts";

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

const busyboxRecipe: Recipe = {
  name: fullImageName(DEFAULT_BUSYBOX_IMAGE),
  inputFiles: [],
  async make(buildah, container, work) {
    await run("apt-get", ["download", "busybox-static"], { cwd: work }).catch((error: unknown) => {
      throw new Error("apt-get download busybox-static failed (run apt-get update once)", { cause: error });
    });
    const deb = (await readdir(work)).find((f) => f.startsWith("busybox-static") && f.endsWith(".deb"));
    if (!deb) throw new Error(`apt-get download left no busybox-static package in ${work}`);
    const unpacked = join(work, "busybox");
    await run("dpkg-deb", ["-x", join(work, deb), unpacked]);
    await buildah.run(
      ["add", "--chmod", "0755", container, join(unpacked, "bin", "busybox"), "/bin/busybox"],
      {
        quiet: true,
      },
    );
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
  etcd: EtcdBuild[],
  progress: (line: string) => void,
): Promise<ClusterImage[]> {
  const stampFile = join(buildah.storageDir, "cluster-images.json");
  const stamps: Record<string, ClusterImage> = existsSync(stampFile)
    ? JSON.parse(await readFile(stampFile, "utf8"))
    : {};
  const images: ClusterImage[] = [];
  for (const recipe of [...etcd.map(etcdRecipe), busyboxRecipe, redisRecipe]) {
    const inputs = await inputsDigest(recipe);
    const archive = join(buildah.storageDir, `${recipe.name.replace(/[/:]/g, "_")}.oci.tar`);
    const stamp = stamps[recipe.name];
    if (stamp?.inputs === inputs && existsSync(archive) && (await hasImage(buildah, recipe.name))) {
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
    const image = { name: recipe.name, archive, inputs };
    stamps[recipe.name] = image;
    await writeFile(stampFile, `${JSON.stringify(stamps, null, 2)}\n`);
    images.push(image);
    progress(`image: made ${recipe.name} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  return images;
}

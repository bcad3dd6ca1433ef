// Builds the operator's image from the repository's Dockerfile, the one users build, with buildah,
// and exports it as an OCI archive that `ctr images import` (or any registry tool) takes; then the
// images of what a cluster here runs besides it (infra/image/cluster-images.ts):
//   npm run image [-- --rebuild-bases]
// The Dockerfile's base images cannot be pulled here; infra/image/bases.ts makes them under the
// names it uses. Rebuilt only when the build context changes (the files the Dockerfile copies);
// prints a JSON summary (names, sizes, the archive's path) on stdout and progress on stderr.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile, stat, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve } from "node:path";
import { parseArgs, promisify } from "node:util";
import { cacheRoot, ensureAssets } from "../local/assets.ts";
import { baseRecipe, ensureBaseImages } from "./bases.ts";
import { type Buildah, hasImage, imageSize, projectBuildah, pruneStorage } from "./buildah.ts";
import { buildClusterImages } from "./cluster-images.ts";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "..", "..");

/** The files of the build context the image depends on (what .dockerignore lets through and COPY takes). */
const CONTEXT = [
  "Dockerfile",
  ".dockerignore",
  "package.json",
  "package-lock.json",
  "shared",
  "functions",
  "infra",
];
const LEFT_OUT = [/(^|\/)node_modules\//, /^infra\/local\//, /^infra\/image\//, /^infra\/native\/.*\.node$/];

export interface OperatorImage {
  /** The name Kubernetes resolves `etcd-operator:<version>` to. */
  name: string;
  /** An OCI archive of it, for `ctr images import` or `skopeo copy`. */
  archive: string;
  /** Unpacked size, as buildah reports it. */
  size: string;
  /** Bytes the layers take compressed, as a registry would serve them. */
  compressedBytes: number;
  /** The distroless base's unpacked size, for comparison. */
  baseSize: string;
  /** Digest of the build context it was built from, and of its bases' recipe. */
  contextDigest: string;
}

async function contextFiles(path: string): Promise<string[]> {
  const full = join(ROOT, path);
  const info = await stat(full);
  if (!info.isDirectory()) return [path];
  const entries = await readdir(full, { withFileTypes: true });
  const nested = await Promise.all(entries.map((e) => contextFiles(join(path, e.name))));
  return nested.flat();
}

/** A digest of every file the image is built from, by path and content. */
export async function contextDigest(): Promise<string> {
  const files = (await Promise.all(CONTEXT.map((p) => contextFiles(p))))
    .flat()
    .filter((f) => !LEFT_OUT.some((re) => re.test(f)))
    .sort();
  const hash = createHash("sha256");
  for (const file of files)
    hash
      .update(`${file}\0`)
      .update(await readFile(join(ROOT, file)))
      .update("\0");
  return hash.digest("hex").slice(0, 16);
}

/** The compressed size of an OCI archive's layers, from its index and manifest. */
async function compressedBytes(archive: string): Promise<number> {
  const read = async (member: string) =>
    (await run("tar", ["-xOf", archive, member], { maxBuffer: 4 * 1024 * 1024 })).stdout;
  const index = JSON.parse(await read("index.json")) as { manifests: { digest: string }[] };
  const digest = index.manifests[0]?.digest.replace(":", "/") ?? "";
  const manifest = JSON.parse(await read(`blobs/${digest}`)) as { layers: { size: number }[] };
  return manifest.layers.reduce((sum, layer) => sum + layer.size, 0);
}

export interface BuildOptions {
  cacheDir?: string;
  rebuildBases?: boolean;
  progress?: (line: string) => void;
}

export async function buildOperatorImage(options: BuildOptions = {}): Promise<OperatorImage> {
  const cacheDir = options.cacheDir ?? cacheRoot();
  const progress = options.progress ?? ((line: string) => process.stderr.write(`${line}\n`));
  const buildah = await projectBuildah(cacheDir);
  const { version } = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as { version: string };
  const name = `docker.io/library/etcd-operator:${version}`;
  const archive = join(cacheDir, "images", `etcd-operator-${version}.oci.tar`);
  const stampFile = join(cacheDir, "images", "etcd-operator.json");
  const nodeDir = dirname(dirname(process.execPath));
  // The image is stale when its context or its bases' recipe changed.
  const digest = `${await contextDigest()}-${(await baseRecipe(nodeDir)).slice(0, 16)}`;
  const stamp = existsSync(stampFile)
    ? (JSON.parse(await readFile(stampFile, "utf8")) as OperatorImage)
    : undefined;
  if (
    !options.rebuildBases &&
    stamp?.contextDigest === digest &&
    stamp.name === name &&
    existsSync(archive) &&
    (await hasImage(buildah, name))
  ) {
    progress(`image: ${name} is up to date (${stamp.size}, ${archive})`);
    return stamp;
  }
  // What a failed build left (its working containers, its layers) would only take disk space.
  await pruneStorage(buildah);
  await ensureBaseImages(buildah, { nodeDir, progress }, options.rebuildBases);
  const started = Date.now();
  progress(`image: building ${name} from the Dockerfile (log: ${buildah.logFile})`);
  await build(buildah, name);
  await buildah.run(["push", "--quiet", name, `oci-archive:${archive}:${name}`], { quiet: true });
  const pruned = await pruneStorage(buildah);
  if (pruned > 0) progress(`image: removed ${pruned} images earlier builds left unnamed`);
  const image: OperatorImage = {
    name,
    archive,
    size: await imageSize(buildah, name),
    compressedBytes: await compressedBytes(archive),
    baseSize: await imageSize(buildah, "gcr.io/distroless/nodejs24-debian12:nonroot"),
    contextDigest: digest,
  };
  await writeFile(stampFile, `${JSON.stringify(image, null, 2)}\n`);
  progress(
    `image: built ${name} in ${((Date.now() - started) / 1000).toFixed(0)} s: ${image.size} ` +
      `(${(image.compressedBytes / 1024 / 1024).toFixed(1)} MiB compressed; the distroless base ${image.baseSize})`,
  );
  return image;
}

/** The Dockerfile's intermediate stages, named in the storage so that pruning keeps their cache. */
const CACHED_STAGES = ["deps", "build"] as const;

async function build(buildah: Buildah, name: string): Promise<void> {
  // --pull=never: the bases are the ones made here; --layers: a source change reuses the stage
  // that installed the dependencies.
  const bud = (target: string | undefined, tag: string, quiet: boolean) =>
    buildah.run(
      [
        "bud",
        "--pull=never",
        "--layers",
        "--isolation",
        "chroot",
        ...(target ? ["--target", target] : []),
        "-f",
        "Dockerfile",
        "-t",
        tag,
        relative(process.cwd(), ROOT) || ".",
      ],
      { quiet },
    );
  await bud(undefined, name, false);
  // Built above already: each of these only names a stage's last layer (every step a cache hit).
  for (const stage of CACHED_STAGES) await bud(stage, `localhost/etcd-operator-${stage}:cache`, true);
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { "rebuild-bases": { type: "boolean", default: false } } });
  const operator = await buildOperatorImage({ rebuildBases: values["rebuild-bases"] });
  const progress = (line: string) => process.stderr.write(`${line}\n`);
  const { etcd, node, coredns } = await ensureAssets({ only: ["etcd", "node", "coredns"], log: progress });
  const cluster = await buildClusterImages(
    await projectBuildah(cacheRoot()),
    { etcd, node, coredns },
    progress,
  );
  process.stdout.write(`${JSON.stringify({ operator, cluster }, null, 2)}\n`);
}

// buildah as the image builds use it: images kept in the project's cache, never in the machine's
// own container storage. Overlay storage where the kernel has it: vfs copies the whole tree for
// every layer, which made a build that only changed sources take minutes of copying.
import { spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdir, readFile, statfs } from "node:fs/promises";
import { join } from "node:path";

export interface Buildah {
  /** Runs buildah with the project's storage; resolves to its stdout, rejects naming the log to read. */
  run(args: string[], options?: { quiet?: boolean }): Promise<string>;
  /** Where every run's output is appended. */
  logFile: string;
  /** The folder holding the image storage (and stamps about it). */
  storageDir: string;
  /** The argv of a buildah command on the project's storage, for a caller that runs it itself. */
  argv(args: string[]): string[];
}

export type StorageDriver = "overlay" | "vfs";

/** statfs(2)'s f_type of the filesystems overlay cannot stack on (linux/magic.h). */
const OVERLAYFS_MAGIC = 0x794c7630;
const TMPFS_MAGIC = 0x01021994;

/**
 * The storage driver: `ETCD_OPERATOR_BUILDAH_DRIVER` when set, else overlay when the kernel lists
 * it and the cache is not itself on overlay or tmpfs (where overlay cannot stack), else vfs.
 */
export async function storageDriver(cacheDir: string): Promise<StorageDriver> {
  const asked = process.env.ETCD_OPERATOR_BUILDAH_DRIVER;
  if (asked === "overlay" || asked === "vfs") return asked;
  if (asked)
    throw new Error(`ETCD_OPERATOR_BUILDAH_DRIVER must be overlay or vfs, not ${JSON.stringify(asked)}`);
  const filesystems = await readFile("/proc/filesystems", "utf8").catch(() => "");
  if (!/\toverlay$/m.test(filesystems)) return "vfs";
  const { type } = await statfs(cacheDir);
  return type === OVERLAYFS_MAGIC || type === TMPFS_MAGIC ? "vfs" : "overlay";
}

export async function projectBuildah(cacheDir: string): Promise<Buildah> {
  const root = join(cacheDir, "images");
  await mkdir(root, { recursive: true });
  const logFile = join(root, "build.log");
  const driver = await storageDriver(cacheDir);
  // Each driver its own storage: neither can open the other's.
  const storage = [
    "--root",
    join(root, driver === "vfs" ? "storage" : `storage-${driver}`),
    "--runroot",
    join(root, driver === "vfs" ? "run" : `run-${driver}`),
    "--storage-driver",
    driver,
  ];
  return {
    logFile,
    storageDir: root,
    argv: (args) => ["buildah", ...storage, ...args],
    run(args, options = {}) {
      return new Promise((resolve, reject) => {
        const log = createWriteStream(logFile, { flags: "a" });
        log.write(`\n$ buildah ${args.join(" ")}\n`);
        const child = spawn("buildah", [...storage, ...args], { stdio: ["ignore", "pipe", "pipe"] });
        let stdout = "";
        child.stdout.on("data", (chunk: Buffer) => {
          stdout += chunk.toString();
          log.write(chunk);
          if (!options.quiet) process.stderr.write(chunk);
        });
        child.stderr.on("data", (chunk: Buffer) => {
          log.write(chunk);
          if (!options.quiet) process.stderr.write(chunk);
        });
        child.on("error", (error) => {
          log.end();
          reject(new Error(`buildah could not start (apt-get install buildah)`, { cause: error }));
        });
        child.on("close", (code) => {
          log.end();
          if (code === 0) resolve(stdout.trim());
          else reject(new Error(`buildah ${args[0]} failed (exit ${code}); see ${logFile}`));
        });
      });
    },
  };
}

/** Whether an image of that name is in the project's storage. */
export async function hasImage(buildah: Buildah, name: string): Promise<boolean> {
  const out = await buildah
    .run(["images", "--noheading", "--format", "{{.Name}}:{{.Tag}}", name], {
      quiet: true,
    })
    .catch(() => "");
  return out.split("\n").some((line) => line.trim() !== "");
}

/** The image's unpacked size as buildah reports it ("154 MB"). */
export async function imageSize(buildah: Buildah, name: string): Promise<string> {
  const out = await buildah.run(["images", "--json", name], { quiet: true });
  const [image] = JSON.parse(out) as { size?: string }[];
  return image?.size ?? "unknown";
}

/**
 * Removes what earlier builds left in the project's storage: images no name points to and no
 * image builds on (a rebuilt image leaves its predecessor so, and vfs keeps a full copy of every
 * layer: 53 GB after a day of rebuilds), then the layers under them that this frees, and working
 * containers that failed builds left. Named images and the layers they build on stay, so a build
 * keeps its cache as long as its stages are named. Not for a storage another build is using.
 */
export async function pruneStorage(buildah: Buildah): Promise<number> {
  const containers = await buildah.run(["containers", "--quiet"], { quiet: true }).catch(() => "");
  for (const id of containers.split("\n").filter(Boolean)) {
    await buildah.run(["rm", id], { quiet: true }).catch(() => undefined);
  }
  let removed = 0;
  // Each pass frees the layers the previous one left without a child; a chain is a few dozen deep.
  for (let pass = 0; pass < 64; pass++) {
    const dangling = (
      await buildah.run(["images", "--quiet", "--filter", "dangling=true"], { quiet: true }).catch(() => "")
    )
      .split("\n")
      .filter(Boolean);
    if (dangling.length === 0) break;
    const before = removed;
    for (const id of dangling) {
      await buildah.run(["rmi", id], { quiet: true }).then(
        () => removed++,
        () => undefined,
      );
    }
    if (removed === before) break;
  }
  return removed;
}

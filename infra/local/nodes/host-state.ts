// What a real node leaves in the host kernel outside its network namespace: its cgroup subtree
// (where runc puts every container) and mounts under its directory (containers' root filesystems,
// pod network namespaces containerd pins under its state dir, kubelet's volume mounts). Made
// before a node starts, and taken down after it stops, also after a crash.
import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";

const run = promisify(execFile);
const CGROUP_FS = "/sys/fs/cgroup";
const KILL_WAIT_MS = 10_000;

/** Each cgroup hierarchy's mount point: the v1 controllers' (and the hybrid v2 tree), or the one v2 tree. */
function cgroupMounts(): string[] {
  const mounts = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" "))
    .filter((f) => {
      const sep = f.indexOf("-");
      return sep > 0 && (f[sep + 1] === "cgroup" || f[sep + 1] === "cgroup2");
    })
    .map((f) => f[4] ?? "")
    .filter((p) => p.startsWith(CGROUP_FS));
  if (mounts.length === 0) throw new Error(`no cgroup file system is mounted under ${CGROUP_FS}`);
  return mounts;
}

function isCgroup2Root(mount: string): boolean {
  return mount === CGROUP_FS && existsSync(join(CGROUP_FS, "cgroup.controllers"));
}

/**
 * Creates the node's cgroup in every hierarchy: kubelet refuses a --cgroup-root that is missing
 * anywhere. A v1 cpuset cgroup starts with no CPUs and memory nodes, so it gets its parent's.
 */
export async function createNodeCgroup(root: string): Promise<void> {
  for (const mount of cgroupMounts()) {
    const dir = join(mount, root);
    await mkdir(dir, { recursive: true });
    if (existsSync(join(dir, "cpuset.cpus")) && !isCgroup2Root(mount)) {
      for (const file of ["cpuset.cpus", "cpuset.mems"]) {
        if (readFileSync(join(dir, file), "utf8").trim() === "")
          writeFileSync(join(dir, file), readFileSync(join(mount, file), "utf8"));
      }
    }
  }
}

/** Every cgroup directory at or below `dir`, deepest first. */
function cgroupTree(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const below = readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => cgroupTree(join(dir, e.name)));
  return [...below, dir];
}

function pidsIn(dir: string): number[] {
  try {
    return readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** SIGKILLs every process in the node's cgroups (its containers) and removes the cgroups. */
export async function removeNodeCgroup(root: string): Promise<void> {
  const deadline = Date.now() + KILL_WAIT_MS;
  for (const mount of cgroupMounts()) {
    const tree = cgroupTree(join(mount, root));
    for (;;) {
      const pids = tree.flatMap(pidsIn);
      if (pids.length === 0) break;
      if (Date.now() > deadline)
        throw new Error(`processes ${pids.join(" ")} in cgroup ${root} survived SIGKILL`);
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // Gone already.
        }
      }
      await sleep(50);
    }
    for (const dir of tree) {
      // An emptied cgroup can stay busy for a moment while the kernel lets go of its last task.
      for (let attempt = 0; ; attempt++) {
        try {
          if (existsSync(dir)) rmdirSync(dir);
          break;
        } catch (error) {
          if (attempt >= 40) throw new Error(`cannot remove cgroup ${dir}`, { cause: error });
          await sleep(50);
        }
      }
    }
  }
}

/** Mount points at or below `dir` (mountinfo escapes spaces as \040), deepest first. */
export function mountsUnder(dir: string): string[] {
  const prefix = `${dir}/`;
  return readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => (line.split(" ")[4] ?? "").replace(/\\040/g, " "))
    .filter((p) => p === dir || p.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
}

/** Unmounts everything under `dir` (lazily: a mount still held by a dying process goes when it does). */
export async function unmountUnder(dir: string): Promise<void> {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) return;
  for (const mount of mountsUnder(dir)) {
    await run("umount", ["--lazy", mount]).catch((error: unknown) => {
      // A parent's lazy unmount may have taken this one with it.
      if (mountsUnder(dir).includes(mount)) throw new Error(`cannot unmount ${mount}`, { cause: error });
    });
  }
}

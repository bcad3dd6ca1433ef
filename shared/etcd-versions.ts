// The etcd releases this project builds, tests and defaults to: one per minor, the newest patch
// of each. The operator validates versions against these minors; the local control plane builds
// exactly these. Kept free of imports so both sides can use it.

/** One etcd per supported minor, each the newest patch of that minor, oldest first. */
export const ETCD_VERSIONS: readonly string[] = ["3.5.35", "3.6.16", "3.7.3"];

/** The version a cluster gets when its spec names none: the newest we build. */
export const DEFAULT_ETCD_VERSION = ETCD_VERSIONS[ETCD_VERSIONS.length - 1] ?? "3.7.3";

/** "3.5.35" → "3.5" */
export function minorOf(version: string): string {
  return version.split(".").slice(0, 2).join(".");
}

/** "3.5.35" → [3, 5, 35]; undefined for anything else. */
export function parseVersion(version: string): [number, number, number] | undefined {
  const match = /^v?(\d+)\.(\d+)\.(\d+)$/.exec(version);
  return match ? [Number(match[1]), Number(match[2]), Number(match[3])] : undefined;
}

export function compareVersions(a: string, b: string): number {
  const x = parseVersion(a) ?? [0, 0, 0];
  const y = parseVersion(b) ?? [0, 0, 0];
  for (let i = 0; i < 3; i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
  return 0;
}

/** The newest patch we build of a minor ("3.6" → "3.6.16"), if we build that minor. */
export function newestPatchOf(minor: string): string | undefined {
  return [...ETCD_VERSIONS].reverse().find((v) => minorOf(v) === minor);
}

export type UpgradePath =
  | { ok: true; steps: string[] }
  | { ok: false; reason: "downgrade" | "no-path"; message: string };

/**
 * The versions a cluster passes through from `current` to `target`, following etcd's rules:
 * patch releases freely; one minor at a time, entering each minor at the newest patch we have
 * (each minor's upgrade guide names the lowest patch of the previous minor it accepts, and the
 * newest patch always satisfies it). Downgrades are refused here: they need etcd's own
 * downgrade procedure.
 */
export function upgradePath(current: string, target: string): UpgradePath {
  const from = parseVersion(current);
  const to = parseVersion(target);
  if (!from || !to)
    return { ok: false, reason: "no-path", message: `cannot compare versions "${current}" and "${target}"` };
  const order = compareVersions(target, current);
  if (order === 0) return { ok: true, steps: [] };
  if (order < 0) {
    return {
      ok: false,
      reason: "downgrade",
      message: `spec.version ${target} is older than the running ${current}: downgrades are not done automatically`,
    };
  }
  if (from[1] === to[1]) return { ok: true, steps: [target] };
  const steps: string[] = [];
  const currentNewest = newestPatchOf(`${from[0]}.${from[1]}`);
  if (currentNewest && compareVersions(currentNewest, current) > 0) steps.push(currentNewest);
  for (let minor = from[1] + 1; minor < to[1]; minor++) {
    const patch = newestPatchOf(`${from[0]}.${minor}`);
    if (!patch) {
      return {
        ok: false,
        reason: "no-path",
        message: `no etcd ${from[0]}.${minor} release to step through from ${current} to ${target}`,
      };
    }
    steps.push(patch);
  }
  steps.push(target);
  return { ok: true, steps };
}

/**
 * Whether an explicitly allowed downgrade from `current` to `target` is one etcd can do with its
 * downgrade API: exactly one minor down, from 3.6 or newer (3.6 is the first release whose
 * downgrade procedure is supported), to a release we build. undefined when it can; otherwise why not.
 */
export function downgradeProblem(current: string, target: string): string | undefined {
  const from = parseVersion(current);
  const to = parseVersion(target);
  if (!from || !to) return `cannot compare versions "${current}" and "${target}"`;
  if (from[0] !== to[0] || to[1] !== from[1] - 1) {
    return `etcd downgrades one minor version at a time (${current} → ${from[0]}.${from[1] - 1}.x), not to ${target}`;
  }
  if (compareVersions(`${from[0]}.${from[1]}.0`, "3.6.0") < 0) {
    return `etcd supports downgrades only from 3.6 on, not from ${current}`;
  }
  if (!ETCD_VERSIONS.includes(target)) {
    return `etcd ${target} is not a release this operator runs (have ${ETCD_VERSIONS.join(", ")})`;
  }
  return undefined;
}

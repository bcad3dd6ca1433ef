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

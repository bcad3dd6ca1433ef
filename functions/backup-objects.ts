// How backup objects are named and which of them a periodic policy keeps. Pure, so every rule is
// unit-tested.
//
// A one-shot backup is written exactly at its path (coreos compatible: the restore example names
// the same path). A periodic backup appends `_<cluster>_v<revision>_<UTC time>` to it, e.g.
// `etcd.backup_example_v4401_20261129-134500.123Z`: cluster, revision and time in the name, and
// names of one prefix sort by time. Next to every backup is `<object>.meta.json` (BackupMetadata).

export const META_SUFFIX = ".meta.json";

export interface BackupMetadata {
  format: 1;
  /** SHA-256 of the backup object, hex. */
  sha256: string;
  /**
   * CRC-32 (zlib's) of the backup object, 8 hex digits: what a restore's seeds check, cheaper
   * than SHA-256 for each of them. Absent in backups taken before it was recorded.
   */
  crc32?: string;
  size: number;
  /** The store's revision when the snapshot began; the snapshot holds at least this revision. */
  revision: number;
  etcdVersion: string;
  /** Keys in the store at `revision` (absent in older backups, or when it was compacted at once). */
  keyCount?: number;
  cluster: string;
  namespace: string;
  member: string;
  /** The EtcdBackup that took it. */
  backup: string;
  createdAt: string;
}

const PERIODIC = /^_([a-z0-9]([-a-z0-9.]*[a-z0-9])?)_v(\d+)_(\d{8}-\d{6}\.\d{3}Z)$/;

function stamp(at: Date): string {
  const iso = at.toISOString(); // 2026-11-29T13:45:00.123Z
  return `${iso.slice(0, 10).replaceAll("-", "")}-${iso.slice(11, 19).replaceAll(":", "")}${iso.slice(19)}`;
}

export function periodicKey(base: string, cluster: string, revision: number, at: Date): string {
  return `${base}_${cluster}_v${revision}_${stamp(at)}`;
}

export interface PeriodicBackup {
  key: string;
  cluster: string;
  revision: number;
  /** Sortable time stamp from the name. */
  stamp: string;
}

/** The periodic backup a key names under base, or undefined (metadata files, other objects). */
export function parsePeriodicKey(base: string, key: string): PeriodicBackup | undefined {
  if (!key.startsWith(`${base}_`) || key.endsWith(META_SUFFIX)) return undefined;
  const match = PERIODIC.exec(key.slice(base.length));
  if (!match) return undefined;
  return { key, cluster: match[1] ?? "", revision: Number(match[3]), stamp: match[4] ?? "" };
}

/** The periodic backups among keys, newest first. */
export function periodicBackups(base: string, keys: readonly string[]): PeriodicBackup[] {
  return keys
    .map((key) => parsePeriodicKey(base, key))
    .filter((b): b is PeriodicBackup => b !== undefined)
    .sort((a, b) => (a.stamp === b.stamp ? b.revision - a.revision : a.stamp < b.stamp ? 1 : -1));
}

/**
 * The periodic backups to delete so that maxBackups remain (0: keep all). `keep` (the backup just
 * taken) is never among them, whatever the clocks say.
 */
export function backupsToPrune(
  base: string,
  keys: readonly string[],
  maxBackups: number,
  keep: string,
): string[] {
  if (maxBackups <= 0) return [];
  const newestFirst = periodicBackups(base, keys).filter((b) => b.key !== keep);
  const room = keys.includes(keep) ? maxBackups - 1 : maxBackups;
  return newestFirst.slice(Math.max(0, room)).map((b) => b.key);
}

/**
 * The object a restore path names: the exact object when it exists, else the newest periodic
 * backup under that path (so a restore can name the EtcdBackup's path and get the latest).
 */
export function restoreCandidate(base: string, keys: readonly string[]): string | undefined {
  if (keys.includes(base)) return base;
  return periodicBackups(base, keys)[0]?.key;
}

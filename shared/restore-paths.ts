// Where a restore's init containers keep their files, inside the member's data volume. A module of
// its own, with no imports: the init containers (infra/restore-init.ts) start a Node process for
// each step, and loading the pod builders with them (client-node and more) took seconds of every
// restore on a busy node.
export const RESTORE_DIR = "/var/etcd/restore";
export const SNAPSHOT_FILE = `${RESTORE_DIR}/snapshot.db`;
export const STAGING_DATA_DIR = `${RESTORE_DIR}/data`;
export const SECRET_DIR = "/etc/etcd-backup-secret";

// Where a restore's init containers keep their files, inside the member's data volume. A module of
// its own, with no imports: the init containers (infra/restore-init.ts) start a Node process for
// each step, and loading the pod builders with them (client-node and more) took seconds of every
// restore on a busy node.
export const RESTORE_DIR = "/var/etcd/restore";
export const SNAPSHOT_FILE = `${RESTORE_DIR}/snapshot.db`;
export const STAGING_DATA_DIR = `${RESTORE_DIR}/data`;
export const SECRET_DIR = "/etc/etcd-backup-secret";
/**
 * Written by the start gate (restore-init.ts await-start) when the operator lets the seed's etcd
 * start; a re-run of the init containers (a re-created sandbox) finds it and does not wait again.
 */
export const START_MARKER = "/var/etcd/restore-started";
/** Where the start gate listens: etcd's client port, free until etcd starts, and open to the operator. */
export const START_GATE_PORT = 2379;
export const START_GATE_PATH = "/etcd-operator/restore/start";
/** The header that carries the restore's token: only a request naming this restore opens the gate. */
export const START_GATE_TOKEN_HEADER = "x-etcd-restore-token";
/**
 * The exit code of the fetch when the backup itself is bad (checksum or etcd's trailer): the
 * restore fails at once instead of the kubelet trying again with the same bytes.
 */
export const BAD_BACKUP_EXIT_CODE = 3;

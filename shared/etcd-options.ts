// How the operator reaches etcd's client port: TLS material and the per-call deadline, shared by
// the gRPC client (shared/etcd-members.ts) and the HTTP one (shared/etcd-http.ts).

/** Per-RPC deadline when the caller gives none. */
export const DEFAULT_ETCD_TIMEOUT_MS = 3_000;

/** TLS material for etcd's client port, as PEM strings. */
export interface EtcdTLS {
  /** CA that signed the members' serving certificates. */
  ca: string;
  /** Client certificate and key, for members started with --client-cert-auth. Both or neither. */
  cert?: string;
  key?: string;
  /**
   * The name to check the serving certificate against, when the endpoints are IPs but the
   * certificates carry DNS names (e.g. `*.<cluster>.<ns>.svc`).
   */
  serverName?: string;
}

export interface EtcdClientOptions {
  /** When set, every endpoint is dialled with TLS, whatever its URL scheme says. */
  tls?: EtcdTLS;
  /** Deadline of each RPC in ms (default 3000). */
  timeoutMs?: number;
}

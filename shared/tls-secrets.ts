// Checks the TLS Secrets an EtcdCluster names (spec.TLS.static) before anything is built from them:
// each Secret exists, has its keys, holds PEM that parses, a certificate that is valid now, a key
// that belongs to it, a CA bundle that signed it, and names (SANs) that cover what clients and
// peers will dial. A bad Secret is reported by the reconcile and no member is created or replaced
// from it, so a typo in a certificate never reaches a running cluster.
//
// Parsing and name matching use Node's own X509Certificate (OpenSSL): `checkHost` applies the
// RFC 6125 wildcard rules and `checkPrivateKey` compares the key pair, so nothing here re-implements
// ASN.1 or name matching. Names are matched against SANs only (`subject: "never"`), as Go's TLS
// (etcd and its clients) does since Go 1.15: a name only in the CN does not count.
import { createHash, createPrivateKey, type KeyObject, X509Certificate } from "node:crypto";
import type { NormalizedSpec } from "./api/etcd-cluster.ts";
import type { EtcdTLS } from "./etcd-members.ts";
import { clientServiceName, memberHost } from "./member-pods.ts";

/** Key names of one Secret: a certificate, its private key and the CA bundle to trust. */
export interface SecretKeys {
  cert: string;
  key: string;
  ca: string;
}

// The coreos operator's key names (so its Secrets work unchanged) …
export const PEER_KEYS: SecretKeys = { cert: "peer.crt", key: "peer.key", ca: "peer-ca.crt" };
export const SERVER_KEYS: SecretKeys = { cert: "server.crt", key: "server.key", ca: "server-ca.crt" };
export const OPERATOR_KEYS: SecretKeys = {
  cert: "etcd-client.crt",
  key: "etcd-client.key",
  ca: "etcd-client-ca.crt",
};
// … and those of a kubernetes.io/tls Secret as cert-manager writes it, used when the coreos ones
// are absent, so a cert-manager Certificate's Secret can be named directly.
export const KUBERNETES_TLS_KEYS: SecretKeys = { cert: "tls.crt", key: "tls.key", ca: "ca.crt" };

/** PEM material of one Secret, after its checks passed. */
export interface CertKeyCa {
  cert: string;
  key: string;
  ca: string;
}

export type Usage = "server" | "client";

/** What one Secret must satisfy. */
export interface SecretRequirement {
  /** The spec field naming the Secret, for messages. */
  field: string;
  namespace: string;
  name: string;
  keys: SecretKeys;
  /** Names the certificate must be valid for (wildcard certificates match by RFC 6125). */
  dnsNames: { name: string; why: string }[];
  /** Extended key usages it must allow (when it restricts them at all). */
  usages: Usage[];
  /**
   * The Secret's own CA bundle must have signed its certificate: true for peers, who verify each
   * other with it. A server's or client's bundle is for verifying the other side instead.
   */
  signedByOwnCa?: boolean;
}

export type Checked<T> = { ok: true; value: T } | { ok: false; problems: string[] };

const EKU_OID: Record<Usage, string> = {
  server: "1.3.6.1.5.5.7.3.1",
  client: "1.3.6.1.5.5.7.3.2",
};
const ANY_EKU_OID = "2.5.29.37.0";

const PEM_CERT_RE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Every certificate of a PEM bundle; throws when there is none or one does not parse. */
export function parseCertificates(pem: string): X509Certificate[] {
  const blocks = pem.match(PEM_CERT_RE) ?? [];
  if (blocks.length === 0) throw new Error("no PEM certificate in it");
  return blocks.map((block) => new X509Certificate(block));
}

/** The key names a Secret uses: the coreos ones, or kubernetes.io/tls's when none of those is there. */
export function keysIn(data: Record<string, string>, keys: SecretKeys): SecretKeys {
  const coreosAbsent = [keys.cert, keys.key, keys.ca].every((k) => data[k] === undefined);
  return coreosAbsent ? KUBERNETES_TLS_KEYS : keys;
}

function keyOf(data: Record<string, string>, keys: SecretKeys, which: keyof SecretKeys): string | undefined {
  return data[keysIn(data, keys)[which]];
}

/** Whether `cert` was signed by one of `issuers`, directly or through intermediates of `chain`. */
function chainsTo(cert: X509Certificate, chain: X509Certificate[], issuers: X509Certificate[]): boolean {
  let current = cert;
  for (let depth = 0; depth <= chain.length; depth++) {
    if (issuers.some((ca) => current.checkIssued(ca) && current.verify(ca.publicKey))) return true;
    const next = chain.find((c) => c !== current && current.checkIssued(c) && current.verify(c.publicKey));
    if (!next) return false;
    current = next;
  }
  return false;
}

function describe(cert: X509Certificate): string {
  return cert.subject.replace(/\n/g, ", ") || "(no subject)";
}

/**
 * Checks one Secret's data against what it is used for. `trustedBy` is the CA bundle of whoever
 * verifies this certificate from another Secret, when known (the operator's CA for the serving
 * certificate, the members' server-ca.crt for the operator's); peers use their own
 * (`signedByOwnCa`).
 */
export function checkSecret(
  data: Record<string, string> | undefined,
  req: SecretRequirement,
  nowMs: number,
  trustedBy?: { what: string; pem: string },
): Checked<CertKeyCa> {
  const where = `Secret ${req.namespace}/${req.name} (${req.field})`;
  if (data === undefined) return { ok: false, problems: [`${where} does not exist`] };
  const cert = keyOf(data, req.keys, "cert");
  const key = keyOf(data, req.keys, "key");
  const ca = keyOf(data, req.keys, "ca");
  const missing = (
    [
      ["cert", cert],
      ["key", key],
      ["ca", ca],
    ] as const
  ).flatMap(([which, value]) => (value === undefined || value.trim() === "" ? [req.keys[which]] : []));
  if (missing.length > 0 || cert === undefined || key === undefined || ca === undefined) {
    return {
      ok: false,
      problems: [
        `${where} has no ${missing.join(", ")} (keys ${req.keys.cert}, ${req.keys.key}, ${req.keys.ca} are needed, ` +
          `or ${KUBERNETES_TLS_KEYS.cert}, ${KUBERNETES_TLS_KEYS.key}, ${KUBERNETES_TLS_KEYS.ca} as cert-manager writes them)`,
      ],
    };
  }
  const problems: string[] = [];
  let chain: X509Certificate[] = [];
  let cas: X509Certificate[] = [];
  let privateKey: KeyObject | undefined;
  try {
    chain = parseCertificates(cert);
  } catch (error) {
    problems.push(`${where}: ${req.keys.cert} is not a PEM certificate (${messageOf(error)})`);
  }
  try {
    cas = parseCertificates(ca);
  } catch (error) {
    problems.push(`${where}: ${req.keys.ca} is not a PEM CA bundle (${messageOf(error)})`);
  }
  try {
    privateKey = createPrivateKey(key);
  } catch (error) {
    // The error says why it did not parse, never what the key is.
    problems.push(`${where}: ${req.keys.key} is not a PEM private key (${messageOf(error)})`);
  }
  const leaf = chain[0];
  if (!leaf) return { ok: false, problems };

  const name = describe(leaf);
  if (nowMs < leaf.validFromDate.getTime())
    problems.push(`${where}: certificate ${name} is not valid before ${leaf.validFromDate.toISOString()}`);
  if (nowMs > leaf.validToDate.getTime())
    problems.push(`${where}: certificate ${name} expired on ${leaf.validToDate.toISOString()}`);
  if (privateKey && !leaf.checkPrivateKey(privateKey))
    problems.push(`${where}: ${req.keys.key} is not the private key of certificate ${name} (key mismatch)`);
  for (const { name: host, why } of req.dnsNames) {
    if (leaf.checkHost(host, { subject: "never" }) === undefined) {
      problems.push(
        `${where}: certificate ${name} is not valid for ${host} (${why}); its SANs are ${leaf.subjectAltName ?? "none"}`,
      );
    }
  }
  // Go refuses a certificate whose extended key usages exclude the use (no extension: any use).
  const ekus = leaf.keyUsage;
  if (ekus && ekus.length > 0 && !ekus.includes(ANY_EKU_OID)) {
    for (const usage of req.usages)
      if (!ekus.includes(EKU_OID[usage]))
        problems.push(
          `${where}: certificate ${name} does not allow ${usage} authentication (extended key usage)`,
        );
  }
  if (req.signedByOwnCa && cas.length > 0 && !chainsTo(leaf, chain.slice(1), cas))
    problems.push(`${where}: certificate ${name} is not signed by a CA in ${req.keys.ca}`);
  if (trustedBy !== undefined) {
    let trusted: X509Certificate[] = [];
    try {
      trusted = parseCertificates(trustedBy.pem);
    } catch {
      // Reported where that bundle is checked.
    }
    if (trusted.length > 0 && !chainsTo(leaf, chain.slice(1), trusted))
      problems.push(
        `${where}: certificate ${name} is not signed by a CA in ${trustedBy.what}, so it would be refused`,
      );
  }
  if (problems.length > 0) return { ok: false, problems };
  // Passed on re-encoded, one certificate per block: a bundle made by `cat a.pem b.pem` from a file
  // without a final newline ("-----END CERTIFICATE----------BEGIN …") parses here but makes
  // OpenSSL (the operator's client) drop the whole bundle.
  return {
    ok: true,
    value: { cert: pemOf(chain), key: key.endsWith("\n") ? key : `${key}\n`, ca: pemOf(cas) },
  };
}

function pemOf(certs: X509Certificate[]): string {
  return certs.map((c) => (c.toString().endsWith("\n") ? c.toString() : `${c.toString()}\n`)).join("");
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The member certificates, checked: what pods mount (see member-tls.ts). */
export interface MemberTlsMaterial {
  peer?: CertKeyCa;
  server?: CertKeyCa;
  /** Digest of the material, recorded on each pod: members with another one are rolled. */
  hash: string;
}

/** Where the operator's client certificate lives, for pods that must reach members themselves. */
export interface OperatorTlsSource {
  secretName: string;
  keys: SecretKeys;
  serverName: string;
}

export interface ClusterTls {
  member: MemberTlsMaterial;
  /** The operator's client TLS for the members' client port, with client TLS on. */
  client?: EtcdTLS;
  /** The operatorSecret and its key names (with client TLS on). */
  operatorSource?: OperatorTlsSource;
}

/**
 * What member pods get: the checked material, or undefined when the Secrets name no member
 * certificate (`TLS: {static: {}}`: members speak plain, and nothing is rotated).
 */
export function memberMaterial(tls: ClusterTls): MemberTlsMaterial | undefined {
  return tls.member.peer || tls.member.server ? tls.member : undefined;
}

/** Digest of the member material; changes exactly when a Secret's used content changes. */
export function tlsHash(peer: CertKeyCa | undefined, server: CertKeyCa | undefined): string {
  const digest = createHash("sha256");
  for (const part of [peer, server]) {
    for (const value of part ? [part.cert, part.key, part.ca] : ["-", "-", "-"]) {
      digest.update(String(value.length));
      digest.update(":");
      digest.update(value);
    }
  }
  return digest.digest("hex").slice(0, 20);
}

/** The names the cluster's certificates must cover (the operator's URLs use exactly these). */
export function requiredNames(clusterName: string, namespace: string, clusterDomain?: string) {
  const sample = memberHost(`${clusterName}-member`, clusterName, namespace, clusterDomain);
  const suffix = sample.slice(`${clusterName}-member.`.length);
  const wildcard = `*.${suffix}`;
  const member = {
    name: sample,
    why: `members are reached as <member>.${suffix}: ${wildcard}`,
  };
  const client = {
    name: `${clientServiceName(clusterName)}.${namespace}.svc`,
    why: "the client Service, and the name the operator checks",
  };
  return { member, client };
}

/**
 * Reads and checks the Secrets of `spec.TLS.static`. `read` returns a Secret's decoded data
 * (undefined when it does not exist). All problems are collected, so one message lists them all.
 */
export async function loadClusterTls(
  read: (namespace: string, name: string) => Promise<Record<string, string> | undefined>,
  clusterName: string,
  namespace: string,
  spec: NormalizedSpec,
  nowMs: number,
): Promise<Checked<ClusterTls>> {
  const st = spec.TLS?.static;
  const peerName = st?.member?.peerSecret;
  const serverName = st?.member?.serverSecret;
  const operatorName = st?.operatorSecret;
  const names = requiredNames(clusterName, namespace, spec.pod.ClusterDomain);
  const [peerData, serverData, operatorData] = await Promise.all(
    [peerName, serverName, operatorName].map((n) => (n ? read(namespace, n) : Promise.resolve(undefined))),
  );
  const problems: string[] = [];
  let peer: CertKeyCa | undefined;
  let server: CertKeyCa | undefined;
  let operator: CertKeyCa | undefined;
  if (peerName) {
    const checked = checkSecret(
      peerData,
      {
        field: "spec.TLS.static.member.peerSecret",
        namespace,
        name: peerName,
        keys: PEER_KEYS,
        dnsNames: [names.member],
        // A member both dials its peers and serves them with this one certificate.
        usages: ["server", "client"],
        signedByOwnCa: true,
      },
      nowMs,
    );
    if (checked.ok) peer = checked.value;
    else problems.push(...checked.problems);
  }
  if (serverName) {
    const operatorCa = operatorData
      ? (operatorData[OPERATOR_KEYS.ca] ?? operatorData[KUBERNETES_TLS_KEYS.ca])
      : undefined;
    const checked = checkSecret(
      serverData,
      {
        field: "spec.TLS.static.member.serverSecret",
        namespace,
        name: serverName,
        keys: SERVER_KEYS,
        dnsNames: [names.member, names.client],
        usages: ["server"],
      },
      nowMs,
      operatorCa ? { what: `the operator's ${OPERATOR_KEYS.ca}`, pem: operatorCa } : undefined,
    );
    if (checked.ok) server = checked.value;
    else problems.push(...checked.problems);
  }
  if (operatorName) {
    const serverCa = serverData
      ? (serverData[SERVER_KEYS.ca] ?? serverData[KUBERNETES_TLS_KEYS.ca])
      : undefined;
    const checked = checkSecret(
      operatorData,
      {
        field: "spec.TLS.static.operatorSecret",
        namespace,
        name: operatorName,
        keys: OPERATOR_KEYS,
        dnsNames: [],
        usages: ["client"],
      },
      nowMs,
      // Members check the operator's client certificate against their server-ca.crt.
      serverCa ? { what: `the members' ${SERVER_KEYS.ca}`, pem: serverCa } : undefined,
    );
    if (checked.ok) operator = checked.value;
    else problems.push(...checked.problems);
  }
  if (problems.length > 0) return { ok: false, problems };
  const member: MemberTlsMaterial = { peer, server, hash: tlsHash(peer, server) };
  const client: EtcdTLS | undefined = operator
    ? { ca: operator.ca, cert: operator.cert, key: operator.key, serverName: names.client.name }
    : undefined;
  const operatorSource: OperatorTlsSource | undefined =
    operator && operatorName && operatorData
      ? { secretName: operatorName, keys: keysIn(operatorData, OPERATOR_KEYS), serverName: names.client.name }
      : undefined;
  return { ok: true, value: { member, client, operatorSource } };
}

// The serving certificate: from files (e.g. a cert-manager Secret mounted into the pod; re-read when
// they change, so renewals need no restart), or, for small installs and tests, from a CA made at
// start-up (shared/pki.ts). The API server must trust it to call the webhook: with files, the
// manifests carry the CA; self-signed, the server writes its CA into the ValidatingWebhookConfiguration
// (webhook-configuration.ts keepCaBundle). With HTTP_TLS_SECRET, that CA is made once and kept in
// a Secret that every replica serves from (shared-tls.ts).
import { readFile, stat } from "node:fs/promises";
import { isIP } from "node:net";
import type { CoreV1Api } from "@kubernetes/client-node";
import type { OperatorConfig } from "../../shared/config.ts";

export interface ServingTls {
  cert: string;
  key: string;
  /** Set when self-signed: the CA the API server (and clients) must trust. */
  caCert?: string;
  source: "files" | "self-signed";
}

export async function selfSignedTls(hosts: string[]): Promise<ServingTls> {
  // Loaded only here: @peculiar/x509 and the packages it pulls in (tsyringe, asn1 schemas) are 4 MiB
  // of heap once imported, which every process serving with files or plain HTTP (the default, and
  // every worker) carried for nothing: bench/control.ts workers' live heap 40 MiB instead of 43.
  const { createCertificateAuthority, issueCertificate } = await import("../../shared/pki.ts");
  const ca = await createCertificateAuthority("etcd-operator webhook CA", 3650);
  const leaf = await issueCertificate(ca, {
    commonName: hosts[0] ?? "etcd-operator",
    dnsNames: hosts.filter((h) => isIP(h) === 0),
    ipAddresses: hosts.filter((h) => isIP(h) !== 0),
    usage: ["server"],
    validDays: 3650,
  });
  return { cert: leaf.cert, key: leaf.key, caCert: ca.cert, source: "self-signed" };
}

async function readFiles(certFile: string, keyFile: string): Promise<ServingTls> {
  try {
    const [cert, key] = await Promise.all([readFile(certFile, "utf8"), readFile(keyFile, "utf8")]);
    return { cert, key, source: "files" };
  } catch (error) {
    throw new Error(`cannot read the serving certificate (${certFile}, ${keyFile})`, { cause: error });
  }
}

/**
 * The TLS the config asks for, or undefined for plain HTTP. Self-signed with a Secret named, the
 * certificate every replica shares (shared-tls.ts), in `namespace`.
 */
export async function servingTls(
  config: OperatorConfig,
  kube: { core: CoreV1Api; namespace: string },
): Promise<ServingTls | undefined> {
  if (config.httpTlsCertFile && config.httpTlsKeyFile)
    return readFiles(config.httpTlsCertFile, config.httpTlsKeyFile);
  if (!config.httpTlsSelfSigned) return undefined;
  if (!config.httpTlsSecret) return selfSignedTls(config.httpTlsHosts);
  const { sharedSelfSignedTls } = await import("./shared-tls.ts");
  return sharedSelfSignedTls(kube.core, kube.namespace, config.httpTlsSecret, config.httpTlsHosts);
}

/**
 * Calls `apply` with the files' new contents whenever their modification time changes (checked every
 * `everyMs`, default 60 s). A half-written pair fails to load and is tried again next round.
 */
export function watchCertificateFiles(options: {
  certFile: string;
  keyFile: string;
  apply: (tls: ServingTls) => void;
  onError: (error: unknown) => void;
  everyMs?: number;
}): { stop(): void } {
  let last = "";
  const check = async () => {
    try {
      const [cert, key] = await Promise.all([stat(options.certFile), stat(options.keyFile)]);
      const stamp = `${cert.mtimeMs}/${key.mtimeMs}`;
      if (last === "") last = stamp;
      if (stamp === last) return;
      options.apply(await readFiles(options.certFile, options.keyFile));
      last = stamp;
    } catch (error) {
      options.onError(error);
    }
  };
  void check();
  const timer = setInterval(() => void check(), options.everyMs ?? 60_000);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

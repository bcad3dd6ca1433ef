// A small certificate authority built on WebCrypto and @peculiar/x509. The local control plane
// uses it for kube-apiserver's serving and client certificates; tests use it to make TLS material
// for etcd members. ECDSA P-256 keeps generation fast (milliseconds, unlike RSA).
import "reflect-metadata"; // @peculiar/x509 resolves its parts through tsyringe, which needs it
import { webcrypto } from "node:crypto";
import * as x509 from "@peculiar/x509";

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

x509.cryptoProvider.set(webcrypto);

const ALGORITHM: webcrypto.EcKeyGenParams & webcrypto.EcdsaParams = {
  name: "ECDSA",
  namedCurve: "P-256",
  hash: "SHA-256",
};
const DAY_MS = 24 * 60 * 60 * 1000;

export interface KeyAndCert {
  /** PEM of the certificate. */
  cert: string;
  /** PEM (PKCS#8) of the private key. */
  key: string;
}

export interface CertificateAuthority extends KeyAndCert {
  signingKey: CryptoKey;
  certificate: x509.X509Certificate;
}

export interface LeafOptions {
  commonName: string;
  organizations?: string[];
  dnsNames?: string[];
  ipAddresses?: string[];
  usage: ("server" | "client")[];
  validDays?: number;
  /** Back-date or future-date the certificate, for tests of expired material. */
  notBefore?: Date;
  notAfter?: Date;
}

async function generateKeys(): Promise<CryptoKeyPair> {
  return webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]) as Promise<CryptoKeyPair>;
}

async function privateKeyPem(key: CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey("pkcs8", key);
  return x509.PemConverter.encode(der, "PRIVATE KEY");
}

export async function publicKeyPem(key: CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey("spki", key);
  return x509.PemConverter.encode(der, "PUBLIC KEY");
}

function escapeDnValue(value: string): string {
  return value.replace(/([,+"\\<>;=])/g, "\\$1");
}

function distinguishedName(commonName: string, organizations: string[] = []): string {
  return [`CN=${escapeDnValue(commonName)}`, ...organizations.map((o) => `O=${escapeDnValue(o)}`)].join(", ");
}

export async function createCertificateAuthority(
  commonName: string,
  validDays = 365,
): Promise<CertificateAuthority> {
  const keys = await generateKeys();
  const now = Date.now();
  const certificate = await x509.X509CertificateGenerator.createSelfSigned({
    name: distinguishedName(commonName),
    keys,
    signingAlgorithm: ALGORITHM,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + validDays * DAY_MS),
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return {
    cert: certificate.toString("pem"),
    key: await privateKeyPem(keys.privateKey),
    signingKey: keys.privateKey,
    certificate,
  };
}

export async function issueCertificate(ca: CertificateAuthority, options: LeafOptions): Promise<KeyAndCert> {
  const keys = await generateKeys();
  const now = Date.now();
  const extendedUsages = options.usage.map((u) =>
    u === "server" ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth,
  );
  const altNames: x509.JsonGeneralName[] = [
    ...(options.dnsNames ?? []).map((value) => ({ type: "dns" as const, value })),
    ...(options.ipAddresses ?? []).map((value) => ({ type: "ip" as const, value })),
  ];
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(
      x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
      true,
    ),
    new x509.ExtendedKeyUsageExtension(extendedUsages),
    await x509.AuthorityKeyIdentifierExtension.create(ca.certificate),
  ];
  if (altNames.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(altNames));
  const certificate = await x509.X509CertificateGenerator.create({
    subject: distinguishedName(options.commonName, options.organizations),
    issuer: ca.certificate.subject,
    publicKey: keys.publicKey,
    signingKey: ca.signingKey,
    signingAlgorithm: ALGORITHM,
    notBefore: options.notBefore ?? new Date(now - 60_000),
    notAfter: options.notAfter ?? new Date(now + (options.validDays ?? 365) * DAY_MS),
    extensions,
  });
  return { cert: certificate.toString("pem"), key: await privateKeyPem(keys.privateKey) };
}

/** A bare key pair in PEM, e.g. for signing service-account tokens. */
export async function createKeyPair(): Promise<{ privateKey: string; publicKey: string }> {
  const keys = await generateKeys();
  return { privateKey: await privateKeyPem(keys.privateKey), publicKey: await publicKeyPem(keys.publicKey) };
}

// The checks of spec.TLS.static Secrets (shared/tls-secrets.ts), on certificates made here with
// shared/pki.ts: what is accepted, and a clear message for each way a Secret can be wrong.
import t from "tap";
import type { NormalizedSpec } from "../shared/api/etcd-cluster.ts";
import { normalizedMaintenance } from "../shared/api/validate-etcd-cluster.ts";
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueCertificate,
  type KeyAndCert,
} from "../shared/pki.ts";
import { loadClusterTls, tlsHash } from "../shared/tls-secrets.ts";

const NS = "team";
const NAME = "db";
const DAY = 24 * 60 * 60 * 1000;

const ca = await createCertificateAuthority("etcd-ca");
const otherCa = await createCertificateAuthority("other-ca");

function peerOf(authority: CertificateAuthority, dnsNames = [`*.${NAME}.${NS}.svc`]): Promise<KeyAndCert> {
  return issueCertificate(authority, { commonName: "peer", dnsNames, usage: ["server", "client"] });
}
function serverOf(
  authority: CertificateAuthority,
  dnsNames = [`*.${NAME}.${NS}.svc`, `${NAME}-client.${NS}.svc`],
): Promise<KeyAndCert> {
  return issueCertificate(authority, { commonName: "server", dnsNames, usage: ["server", "client"] });
}
const operatorCert = await issueCertificate(ca, { commonName: "etcd-operator", usage: ["client"] });

function peerSecret(pair: KeyAndCert, caPem = ca.cert): Record<string, string> {
  return { "peer.crt": pair.cert, "peer.key": pair.key, "peer-ca.crt": caPem };
}
function serverSecret(pair: KeyAndCert, caPem = ca.cert): Record<string, string> {
  return { "server.crt": pair.cert, "server.key": pair.key, "server-ca.crt": caPem };
}
const operatorSecret = {
  "etcd-client.crt": operatorCert.cert,
  "etcd-client.key": operatorCert.key,
  "etcd-client-ca.crt": ca.cert,
};

const SPEC: NormalizedSpec = {
  size: 3,
  repository: "gcr.io/etcd-development/etcd",
  version: "3.5.35",
  paused: false,
  pod: {},
  maintenance: normalizedMaintenance(undefined),
  TLS: { static: { member: { peerSecret: "peer", serverSecret: "server" }, operatorSecret: "operator" } },
};

async function load(
  secrets: Record<string, Record<string, string> | undefined>,
  spec = SPEC,
  now = Date.now(),
) {
  return loadClusterTls(async (_ns, name) => secrets[name], NAME, NS, spec, now);
}

function problemsOf(result: Awaited<ReturnType<typeof load>>): string {
  return result.ok ? "" : result.problems.join("\n");
}

const goodPeer = await peerOf(ca);
const goodServer = await serverOf(ca);
const good = { peer: peerSecret(goodPeer), server: serverSecret(goodServer), operator: operatorSecret };

t.test(
  "valid coreos Secrets pass, with the operator's client TLS checked against the client Service name",
  async (t) => {
    const result = await load(good);
    t.ok(result.ok, problemsOf(result));
    if (!result.ok) return;
    t.equal(result.value.client?.serverName, `${NAME}-client.${NS}.svc`);
    t.equal(result.value.client?.cert?.trim(), operatorCert.cert.trim());
    t.equal(result.value.member.hash, tlsHash(result.value.member.peer, result.value.member.server));
  },
);

t.test("peer TLS alone needs only the peer Secret", async (t) => {
  const spec: NormalizedSpec = { ...SPEC, TLS: { static: { member: { peerSecret: "peer" } } } };
  const result = await load({ peer: good.peer }, spec);
  t.ok(result.ok, problemsOf(result));
  if (result.ok) t.equal(result.value.client, undefined, "the operator talks plain to the client port");
});

t.test("cert-manager's kubernetes.io/tls key names are accepted", async (t) => {
  const tlsKeys = (pair: KeyAndCert) => ({ "tls.crt": pair.cert, "tls.key": pair.key, "ca.crt": ca.cert });
  const result = await load({
    peer: tlsKeys(goodPeer),
    server: tlsKeys(goodServer),
    operator: tlsKeys(operatorCert),
  });
  t.ok(result.ok, problemsOf(result));
});

t.test("the digest changes with any certificate, key or CA, and only then", async (t) => {
  const a = await load(good);
  const b = await load(good);
  const bundle = await load({ ...good, peer: peerSecret(goodPeer, `${ca.cert}${otherCa.cert}`) });
  t.ok(a.ok && b.ok && bundle.ok);
  if (!a.ok || !b.ok || !bundle.ok) return;
  t.equal(a.value.member.hash, b.value.member.hash);
  t.not(a.value.member.hash, bundle.value.member.hash);
});

t.test("a missing Secret is named with its spec field", async (t) => {
  const result = await load({ ...good, peer: undefined });
  t.notOk(result.ok);
  t.match(problemsOf(result), /Secret team\/peer \(spec\.TLS\.static\.member\.peerSecret\) does not exist/);
});

t.test("missing keys are listed", async (t) => {
  const { "server.key": _key, ...withoutKey } = good.server;
  const result = await load({ ...good, server: withoutKey });
  t.notOk(result.ok);
  t.match(problemsOf(result), /Secret team\/server .* has no server\.key/);
});

t.test("wrong SANs name the missing DNS name and the SANs the certificate has", async (t) => {
  const wrong = await serverOf(ca, ["*.other.team.svc"]);
  const result = await load({ ...good, server: serverSecret(wrong) });
  t.notOk(result.ok);
  const text = problemsOf(result);
  t.match(text, /is not valid for db-member\.db\.team\.svc/);
  t.match(text, /is not valid for db-client\.team\.svc/);
  t.match(text, /its SANs are DNS:\*\.other\.team\.svc/);
});

t.test("a name only in the CN does not count (Go checks SANs only)", async (t) => {
  const cnOnly = await issueCertificate(ca, {
    commonName: `x.${NAME}.${NS}.svc`,
    usage: ["server", "client"],
  });
  const result = await load({ ...good, peer: peerSecret(cnOnly) });
  t.notOk(result.ok);
  t.match(problemsOf(result), /its SANs are none/);
});

t.test("an expired certificate, and one not valid yet, are refused", async (t) => {
  const now = Date.now();
  const expired = await issueCertificate(ca, {
    commonName: "peer",
    dnsNames: [`*.${NAME}.${NS}.svc`],
    usage: ["server", "client"],
    notBefore: new Date(now - 30 * DAY),
    notAfter: new Date(now - DAY),
  });
  const early = await issueCertificate(ca, {
    commonName: "server",
    dnsNames: [`*.${NAME}.${NS}.svc`, `${NAME}-client.${NS}.svc`],
    usage: ["server"],
    notBefore: new Date(now + DAY),
    notAfter: new Date(now + 30 * DAY),
  });
  const result = await load({ ...good, peer: peerSecret(expired), server: serverSecret(early) });
  t.notOk(result.ok);
  t.match(problemsOf(result), /certificate CN=peer expired on/);
  t.match(problemsOf(result), /certificate CN=server is not valid before/);
});

t.test("a key that is not the certificate's is a key mismatch", async (t) => {
  const other = await peerOf(ca);
  const result = await load({ ...good, peer: { ...good.peer, "peer.key": other.key } });
  t.notOk(result.ok);
  t.match(problemsOf(result), /peer\.key is not the private key of certificate CN=peer \(key mismatch\)/);
});

t.test("content that is not PEM is reported per key, without echoing it", async (t) => {
  const result = await load({
    ...good,
    peer: { "peer.crt": "hello", "peer.key": "not a key", "peer-ca.crt": ca.cert },
    server: {
      ...good.server,
      "server-ca.crt": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----",
    },
  });
  t.notOk(result.ok);
  const text = problemsOf(result);
  t.match(text, /peer\.crt is not a PEM certificate/);
  t.match(text, /peer\.key is not a PEM private key/);
  t.match(text, /server-ca\.crt is not a PEM CA bundle/);
  t.notMatch(text, /not a key/, "the key's content is not in the message");
});

t.test("a certificate from another CA than its trust bundle is refused", async (t) => {
  const stranger = await peerOf(otherCa);
  const result = await load({ ...good, peer: peerSecret(stranger) });
  t.notOk(result.ok);
  t.match(problemsOf(result), /is not signed by a CA in peer-ca\.crt/);
  const bundled = await load({ ...good, peer: peerSecret(stranger, `${ca.cert}${otherCa.cert}`) });
  t.ok(bundled.ok, "a bundle that trusts both CAs (during a CA change) passes");
});

t.test("the operator must trust the serving certificate, and the members the operator's", async (t) => {
  const stranger = await serverOf(otherCa);
  const result = await load({ ...good, server: serverSecret(stranger) });
  t.notOk(result.ok);
  t.match(problemsOf(result), /not signed by a CA in the operator's etcd-client-ca\.crt/);
  const foreignOperator = await issueCertificate(otherCa, { commonName: "op", usage: ["client"] });
  const result2 = await load({
    ...good,
    operator: {
      ...operatorSecret,
      "etcd-client.crt": foreignOperator.cert,
      "etcd-client.key": foreignOperator.key,
    },
  });
  t.notOk(result2.ok);
  t.match(problemsOf(result2), /not signed by a CA in the members' server-ca\.crt/);
});

t.test("a certificate whose extended key usage excludes its use is refused", async (t) => {
  const serverOnly = await issueCertificate(ca, {
    commonName: "peer",
    dnsNames: [`*.${NAME}.${NS}.svc`],
    usage: ["server"],
  });
  const result = await load({ ...good, peer: peerSecret(serverOnly) });
  t.notOk(result.ok);
  t.match(problemsOf(result), /does not allow client authentication/);
});

t.test(
  "a CA bundle concatenated without a newline is passed on with one certificate per block",
  async (t) => {
    const joined = `${ca.cert.trimEnd()}${otherCa.cert}`;
    const result = await load({ ...good, peer: peerSecret(goodPeer, joined) });
    t.ok(result.ok, problemsOf(result));
    if (!result.ok) return;
    const passed = result.value.member.peer?.ca ?? "";
    t.match(passed, /-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----/);
    t.equal(passed.match(/BEGIN CERTIFICATE/g)?.length, 2);
  },
);

// End-to-end: etcd members with TLS (spec.TLS.static, the coreos fields) against the local control
// plane. A cluster forms with peer and client TLS and serves clients only over TLS with a client
// certificate; its certificates, CA included, are rotated under continuous writes in the usual
// three phases (a CA bundle trusting old and new, then new certificates, then the new CA alone),
// one member at a time, never below quorum, no acknowledged write lost. A Secret with wrong SANs
// is reported on the EtcdCluster and nothing is created.
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import type { EtcdCluster } from "../shared/api/etcd-cluster.ts";
import { type EtcdTLS, endpointStatuses, listMembers } from "../shared/etcd-members.ts";
import { Kube } from "../shared/kube.ts";
import { TLS_HASH_ANNOTATION } from "../shared/member-tls.ts";
import {
  type CertificateAuthority,
  createCertificateAuthority,
  issueCertificate,
  type KeyAndCert,
} from "../shared/pki.ts";
import { createCluster, getCluster, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const NAME = "tls";
const cluster = await startLocalCluster({ name: "e2e-tls" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const kube = new Kube(kc);
const clients = { kube, core, custom };
await installCrds(kc);
const processes: OperatorProcess[] = [];
let stopping = false;
/**
 * The operator, restarted if something outside the test stops it: this machine is shared, PIDs
 * wrap within minutes, and a stray signal once ended ours mid-rotation. A restart is safe by
 * design (stateless steps; operator-upgrade.test.ts SIGKILLs one on purpose) and is reported.
 */
function startOperator(): void {
  const operator = startOperatorProcess(cluster, "all");
  processes.push(operator);
  operator.child.once("exit", (code, signal) => {
    if (stopping) return;
    t.comment(`the operator exited (code ${code}, signal ${signal}); starting a new one`);
    startOperator();
  });
}
startOperator();
t.teardown(async () => {
  stopping = true;
  for (const p of processes) await p.kill("SIGKILL");
});

// ---------------------------------------------------------------------------------------------------
// Certificates

interface Material {
  peer: KeyAndCert;
  server: KeyAndCert;
  operator: KeyAndCert;
  /** A client of our own (the test's reads and writes). */
  client: KeyAndCert;
}

async function materialFrom(ca: CertificateAuthority, clusterName: string): Promise<Material> {
  const member = `*.${clusterName}.${NS}.svc`;
  return {
    peer: await issueCertificate(ca, {
      commonName: "etcd-peer",
      dnsNames: [member],
      usage: ["server", "client"],
    }),
    // etcd's gRPC gateway dials its own client port with the serving certificate: client use too.
    server: await issueCertificate(ca, {
      commonName: "etcd-server",
      dnsNames: [member, `${clusterName}-client.${NS}.svc`, "localhost"],
      usage: ["server", "client"],
    }),
    operator: await issueCertificate(ca, { commonName: "etcd-operator", usage: ["client"] }),
    client: await issueCertificate(ca, { commonName: "test-client", usage: ["client"] }),
  };
}

const ca1 = await createCertificateAuthority("etcd-ca-1");
const ca2 = await createCertificateAuthority("etcd-ca-2");
const old = await materialFrom(ca1, NAME);
const next = await materialFrom(ca2, NAME);
const bundle = `${ca1.cert}\n${ca2.cert}`;

async function putSecret(name: string, stringData: Record<string, string>): Promise<void> {
  const body = { metadata: { name, namespace: NS }, stringData };
  const existing = await kube.readSecret(NS, name);
  if (existing === undefined) await core.createNamespacedSecret({ namespace: NS, body });
  else await core.replaceNamespacedSecret({ namespace: NS, name, body });
}

/** The three coreos Secrets of a cluster, from one set of certificates and a CA bundle. */
async function putSecrets(prefix: string, m: Material, caPem: string): Promise<void> {
  await putSecret(`${prefix}-peer`, {
    "peer.crt": m.peer.cert,
    "peer.key": m.peer.key,
    "peer-ca.crt": caPem,
  });
  await putSecret(`${prefix}-server`, {
    "server.crt": m.server.cert,
    "server.key": m.server.key,
    "server-ca.crt": caPem,
  });
  await putSecret(`${prefix}-operator`, {
    "etcd-client.crt": m.operator.cert,
    "etcd-client.key": m.operator.key,
    "etcd-client-ca.crt": caPem,
  });
}

function tlsSpec(prefix: string): object {
  return {
    static: {
      member: { peerSecret: `${prefix}-peer`, serverSecret: `${prefix}-server` },
      operatorSecret: `${prefix}-operator`,
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Reaching the members from the host: by pod IP, checking the certificate against the client
// Service name (the host has no cluster DNS).

async function livePods(name: string) {
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
  return pods.items.filter((p) => p.status?.podIP && !p.metadata?.deletionTimestamp);
}

async function endpoints(name: string, scheme = "https"): Promise<string[]> {
  return (await livePods(name)).map((p) => `${scheme}://${p.status?.podIP}:2379`);
}

/** What the test's clients use now: the CA bundle, and the client certificate of the phase. */
let credentials: EtcdTLS = {
  ca: ca1.cert,
  cert: old.client.cert,
  key: old.client.key,
  serverName: `${NAME}-client.${NS}.svc`,
};

function tlsClient(hosts: string[], tls: EtcdTLS = credentials): Etcd3 {
  return new Etcd3({
    hosts,
    credentials: {
      rootCertificate: Buffer.from(tls.ca),
      certChain: tls.cert === undefined ? undefined : Buffer.from(tls.cert),
      privateKey: tls.key === undefined ? undefined : Buffer.from(tls.key),
    },
    grpcOptions: {
      "grpc.use_local_subchannel_pool": 1,
      "grpc.ssl_target_name_override": tls.serverName ?? "",
      "grpc.default_authority": tls.serverName ?? "",
    },
  });
}

async function deadline<T>(work: Promise<T>, ms = 4000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A client writing `<prefix><n>` keys every 50 ms until stopped (as in operator-upgrade.test.ts). */
function startWriter(prefix: string): { stop(): Promise<{ acknowledged: string[]; longestGapMs: number }> } {
  const acknowledged: string[] = [];
  let stopped = false;
  let lastSuccess = Date.now();
  let longestGapMs = 0;
  const running = (async () => {
    let i = 0;
    while (!stopped) {
      const client = tlsClient(await endpoints(NAME).catch(() => []));
      try {
        const key = `${prefix}${i++}`;
        await deadline(client.put(key).value("v").exec());
        acknowledged.push(key);
        longestGapMs = Math.max(longestGapMs, Date.now() - lastSuccess);
        lastSuccess = Date.now();
      } catch {
        // Retried with the next key; only acknowledged writes are checked.
      } finally {
        client.close();
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await running;
      return { acknowledged, longestGapMs };
    },
  };
}

/**
 * Watches quorum while it runs: for each look, the voting members (etcd's member list) and how
 * many of them answer. Looks where the list itself could not be read count as below quorum.
 */
function startQuorumWatch(name: string): { stop(): Promise<{ looks: number; below: string[] }> } {
  let stopped = false;
  let looks = 0;
  const below: string[] = [];
  const running = (async () => {
    while (!stopped) {
      const pods = await livePods(name).catch(() => []);
      const byIp = new Map(pods.map((p) => [`https://${p.status?.podIP}:2379`, p.metadata?.name ?? ""]));
      const urls = [...byIp.keys()];
      const options = { tls: credentials, timeoutMs: 3000 };
      const [statuses, members] = await Promise.all([
        endpointStatuses(urls, options),
        listMembers(urls, options).catch(() => undefined),
      ]);
      looks++;
      if (!members) {
        below.push(`no member list (${statuses.map((s) => s.error ?? "ok").join("; ")})`);
      } else {
        const answering = new Set(statuses.filter((s) => s.ok).map((s) => byIp.get(s.endpoint)));
        const voters = members.filter((m) => !m.isLearner);
        const healthy = voters.filter((m) => answering.has(m.name)).length;
        if (healthy < Math.floor(voters.length / 2) + 1)
          below.push(`${healthy} of ${voters.length} voters answer`);
      }
      await new Promise((r) => setTimeout(r, 300));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await running;
      return { looks, below };
    },
  };
}

/** Waits until none of `before` is left and the cluster is steady again with 3 members on one hash. */
async function waitRolled(
  before: string[],
  what: string,
  onLook: (livePods: number) => Promise<void> = async () => {},
): Promise<string> {
  return waitFor(
    what,
    async () => {
      const pods = await livePods(NAME);
      await onLook(pods.length);
      const names = pods.map((p) => p.metadata?.name ?? "");
      const hashes = new Set(pods.map((p) => p.metadata?.annotations?.[TLS_HASH_ANNOTATION]));
      const c = await getCluster(clients, NS, NAME);
      const steady = c.status?.conditions?.find((x) => x.type === "Progressing")?.status === "False";
      const [hash] = [...hashes];
      return steady && pods.length === 3 && hashes.size === 1 && names.every((n) => !before.includes(n))
        ? hash
        : undefined;
    },
    {
      timeoutMs: 240_000,
      intervalMs: 500,
      describe: async () => JSON.stringify((await getCluster(clients, NS, NAME)).status?.conditions),
    },
  );
}

// ---------------------------------------------------------------------------------------------------

t.test("a TLS cluster forms and serves clients only over TLS, with a client certificate", async (t) => {
  const started = Date.now();
  await putSecrets(NAME, old, ca1.cert);
  await createCluster(clients, NS, NAME, { size: 3, TLS: tlsSpec(NAME) });
  await waitReady(clients, NS, NAME, 3, 120_000);
  t.comment(`3 TLS members ready in ${Date.now() - started} ms`);

  const c: EtcdCluster = await getCluster(clients, NS, NAME);
  t.equal(c.status?.clientURL, `https://${NAME}-client.${NS}.svc:2379`, "status names the https client URL");
  const pods = await livePods(NAME);
  const command = pods[0]?.spec?.containers[0]?.command ?? [];
  t.ok(command.includes("--client-cert-auth=true") && command.includes("--peer-client-cert-auth=true"));
  t.ok(
    command.some((a) => a.startsWith("--initial-advertise-peer-urls=https://")),
    "members talk to each other over https",
  );
  const members = await listMembers(await endpoints(NAME), { tls: credentials });
  t.ok(
    members.every((m) => m.peerURLs.every((u) => u.startsWith("https://"))),
    "every peer URL in etcd is https",
  );
  const copies = await core.listNamespacedSecret({ namespace: NS, labelSelector: `etcd_cluster=${NAME}` });
  t.equal(copies.items.length, 3, "each member has its own copy of its certificates");
  t.ok(
    copies.items.every((s) => s.immutable === true && s.metadata?.ownerReferences?.[0]?.kind === "Pod"),
    "immutable, and owned by its pod",
  );

  const client = tlsClient(await endpoints(NAME));
  try {
    await client.put("hello").value("tls");
    t.equal(
      await client.get("hello").string(),
      "tls",
      "a client with the CA and a certificate reads and writes",
    );
  } finally {
    client.close();
  }

  const plain = new Etcd3({
    hosts: await endpoints(NAME, "http"),
    grpcOptions: { "grpc.use_local_subchannel_pool": 1 },
  });
  try {
    await t.rejects(deadline(plain.get("hello").string()), "a plain client is refused");
  } finally {
    plain.close();
  }
  const noCert = tlsClient(await endpoints(NAME), { ca: ca1.cert, serverName: credentials.serverName });
  try {
    await t.rejects(
      deadline(noCert.get("hello").string()),
      "a TLS client without a client certificate is refused",
    );
  } finally {
    noCert.close();
  }
  const strangerCa = await createCertificateAuthority("stranger");
  const stranger = await issueCertificate(strangerCa, { commonName: "stranger", usage: ["client"] });
  const foreign = tlsClient(await endpoints(NAME), {
    ...credentials,
    cert: stranger.cert,
    key: stranger.key,
  });
  try {
    await t.rejects(deadline(foreign.get("hello").string()), "a certificate from another CA is refused");
  } finally {
    foreign.close();
  }
});

t.test(
  "certificates and CA are rotated under writes, one member at a time, never below quorum",
  async (t) => {
    const started = Date.now();
    credentials = { ...credentials, ca: bundle };
    const writer = startWriter("k");
    const watch = startQuorumWatch(NAME);
    const hashes: string[] = [];
    const phases: [string, Material, string][] = [
      ["1: the CA bundle (old and new CA), old certificates", old, bundle],
      ["2: new certificates, CA bundle", next, bundle],
      ["3: the new CA alone", next, ca2.cert],
    ];
    let killed = false;
    for (const [what, material, caPem] of phases) {
      const phaseStart = Date.now();
      const before = (await livePods(NAME)).map((p) => p.metadata?.name ?? "");
      // From phase 2 on, every member trusts both CAs: our client switches to its new certificate.
      if (material === next) credentials = { ...credentials, cert: next.client.cert, key: next.client.key };
      await putSecrets(NAME, material, caPem);
      // Mid-way through phase 2 (a fourth member is joining), the operator is SIGKILLed; the
      // watchdog above starts a new one, which must finish the rotation from what it finds.
      const killMidway = async (count: number) => {
        if (material !== next || caPem !== bundle || killed || count <= 3) return;
        killed = true;
        await processes.at(-1)?.kill("SIGKILL");
      };
      hashes.push(await waitRolled(before, `phase ${what}`, killMidway));
      t.comment(`phase ${what}: ${Date.now() - phaseStart} ms`);
    }
    const { looks, below } = await watch.stop();
    const { acknowledged, longestGapMs } = await writer.stop();
    t.comment(
      `rotation took ${Date.now() - started} ms; ${acknowledged.length} writes, longest gap ${longestGapMs} ms`,
    );

    t.equal(new Set(hashes).size, 3, "each phase rolled the members onto new certificates");
    t.ok(killed, "the operator was SIGKILLed mid-rotation and a new one finished it");
    t.ok(looks > 10, `quorum was looked at throughout (${looks} looks)`);
    t.same(below, [], "a majority of voters answered at every look");
    t.ok(acknowledged.length > 50, `writes went on during the rotation (${acknowledged.length})`);
    t.ok(longestGapMs < 15_000, `writes never stalled long (longest gap ${longestGapMs} ms)`);
    const reader = tlsClient(await endpoints(NAME));
    try {
      let present = 0;
      for (const key of acknowledged) if ((await reader.get(key).string()) === "v") present++;
      t.equal(present, acknowledged.length, "every acknowledged write is present");
      t.equal(await reader.get("hello").string(), "tls", "data from before the rotation is there");
    } finally {
      reader.close();
    }

    // Only the new CA is trusted now: a certificate from the old one is refused.
    const oldClient = tlsClient(await endpoints(NAME), {
      ...credentials,
      cert: old.client.cert,
      key: old.client.key,
    });
    try {
      await t.rejects(
        deadline(oldClient.get("hello").string()),
        "a client certificate of the old CA is refused",
      );
    } finally {
      oldClient.close();
    }
    const events = await core.listNamespacedEvent({
      namespace: NS,
      fieldSelector: `involvedObject.name=${NAME}`,
    });
    const rotated = events.items.filter((e) => e.reason === "MemberRotated").length;
    // Nine, unless the operator looked between two of a phase's three Secret writes.
    t.ok(rotated >= 9, `a MemberRotated Event for each member replaced (${rotated})`);
    await waitFor(
      "the old members' certificate copies to be collected with their pods",
      async () => {
        const copies = await core.listNamespacedSecret({
          namespace: NS,
          labelSelector: `etcd_cluster=${NAME}`,
        });
        return copies.items.length === 3 ? true : undefined;
      },
      { timeoutMs: 60_000 },
    );
  },
);

t.test("a Secret with wrong SANs is reported on the EtcdCluster and nothing is created", async (t) => {
  const bad = "tls-bad";
  const material = await materialFrom(ca1, bad);
  const wrongServer = await issueCertificate(ca1, {
    commonName: "etcd-server",
    dnsNames: ["*.somewhere-else.default.svc"],
    usage: ["server", "client"],
  });
  await putSecrets(bad, { ...material, server: wrongServer }, ca1.cert);
  await createCluster(clients, NS, bad, { size: 3, TLS: tlsSpec(bad) });
  const degraded = await waitFor("the invalid Secret to be reported", async () => {
    const c = await getCluster(clients, NS, bad);
    const condition = c.status?.conditions?.find((x) => x.type === "Degraded");
    return condition?.reason === "InvalidTLSSecret" ? condition : undefined;
  });
  t.match(
    degraded.message ?? "",
    /Secret default\/tls-bad-server \(spec\.TLS\.static\.member\.serverSecret\)/,
  );
  t.match(degraded.message ?? "", /is not valid for tls-bad-client\.default\.svc/);
  const events = await core.listNamespacedEvent({
    namespace: NS,
    fieldSelector: `involvedObject.name=${bad}`,
  });
  const event = events.items.find((e) => e.reason === "InvalidTLSSecret");
  t.equal(event?.type, "Warning", "a Warning Event says so");
  t.match(event?.message ?? "", /SANs are DNS:\*\.somewhere-else\.default\.svc/);

  await new Promise((r) => setTimeout(r, 5000));
  const pods = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${bad}` });
  t.equal(pods.items.length, 0, "no pod was created");
  const services = await core.listNamespacedService({ namespace: NS });
  t.same(
    services.items.map((s) => s.metadata?.name).filter((n) => n?.startsWith(bad)),
    [],
    "no Service was created",
  );
});

t.test("peer TLS alone: members talk TLS among themselves, clients plain HTTP", async (t) => {
  const name = "peers";
  const material = await materialFrom(ca1, name);
  await putSecret(`${name}-peer`, {
    "peer.crt": material.peer.cert,
    "peer.key": material.peer.key,
    "peer-ca.crt": ca1.cert,
  });
  await createCluster(clients, NS, name, {
    size: 3,
    TLS: { static: { member: { peerSecret: `${name}-peer` } } },
  });
  await waitReady(clients, NS, name, 3, 120_000);
  const c = await getCluster(clients, NS, name);
  t.equal(c.status?.clientURL, `http://${name}-client.${NS}.svc:2379`);
  const plain = new Etcd3({
    hosts: await endpoints(name, "http"),
    grpcOptions: { "grpc.use_local_subchannel_pool": 1 },
  });
  try {
    await plain.put("plain").value("yes");
    t.equal(await plain.get("plain").string(), "yes", "a plain client reads and writes");
    const members = await plain.cluster.memberList({ linearizable: true });
    t.ok(
      members.members.every((m) => (m.peerURLs ?? []).every((u) => u.startsWith("https://"))),
      "every peer URL is https",
    );
  } finally {
    plain.close();
  }
});

t.test("two of three TLS members lost with their data: rebuilt from the survivor over TLS", async (t) => {
  const client = tlsClient(await endpoints(NAME));
  const acknowledged: string[] = [];
  try {
    for (let i = 0; i < 100; i++) {
      await client.put(`ack-${i}`).value(`v${i}`);
      acknowledged.push(`ack-${i}`);
    }
  } finally {
    client.close();
  }
  const pods = await livePods(NAME);
  const victims = pods.slice(0, 2).map((p) => p.metadata?.name ?? "");
  for (const name of victims) await core.deleteNamespacedPod({ namespace: NS, name, gracePeriodSeconds: 0 });
  const started = Date.now();
  await waitFor(
    "a QuorumRecovered event",
    async () => {
      const events = await core.listNamespacedEvent({
        namespace: NS,
        fieldSelector: `involvedObject.name=${NAME}`,
      });
      return events.items.some((e) => e.reason === "QuorumRecovered") ? true : undefined;
    },
    {
      timeoutMs: 180_000,
      intervalMs: 500,
      describe: async () => JSON.stringify((await getCluster(clients, NS, NAME)).status?.conditions),
    },
  );
  await waitReady(clients, NS, NAME, 3, 180_000);
  t.comment(`rebuilt and back to 3 members in ${Date.now() - started} ms`);
  const reader = tlsClient(await endpoints(NAME));
  try {
    const values = await reader.getAll().prefix("ack-").strings();
    t.same(
      acknowledged.filter((k) => values[k] !== `v${k.slice(4)}`),
      [],
      "every acknowledged write is there, with its value",
    );
    const members = await reader.cluster.memberList({ linearizable: true });
    t.ok(
      members.members.every((m) => (m.peerURLs ?? []).every((u) => u.startsWith("https://"))),
      "the rebuilt cluster's peers talk https",
    );
  } finally {
    reader.close();
  }
});

// End-to-end: an EtcdBackup of a cluster that serves clients only over TLS, with the coreos
// `clientTLSSecret`: the snapshot is taken with that client certificate and lands in S3; without
// the Secret the backup fails with a reason, and a Secret that is not a client certificate is
// refused before any member is asked. Then the backup suite's round trip on a TLS cluster: 10,000
// keys backed up, the cluster deleted and created again, restored from the backup, serving TLS
// with the same Secrets (its members' peers and clients still need certificates from the CA).
import { Etcd3 } from "etcd3";
import t from "tap";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { createCertificateAuthority, issueCertificate } from "../shared/pki.ts";
import {
  type BackupTestContext,
  everyMemberLostRestored,
  refusedRestoresTouchNothing,
  roundTrip,
  s3SuiteStore,
  under,
} from "./helpers/backup-suite.ts";
import {
  awsSecretData,
  createBackup,
  createSecret,
  startClusterWithStore,
  waitBackupOutcome,
} from "./helpers/backups.ts";
import { createCluster, deleteCluster, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const NAME = "vault";
const {
  local: cluster,
  store,
  clients: c,
} = await startClusterWithStore({ name: "e2e-backup-tls", bucket: "backups" }, (stop) => t.teardown(stop));
await createSecret(c, NS, "aws", awsSecretData(store));
const processes: OperatorProcess[] = [startOperatorProcess(cluster, "all")];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

const ca = await createCertificateAuthority("vault-ca");
const member = `*.${NAME}.${NS}.svc`;
const peer = await issueCertificate(ca, {
  commonName: "peer",
  dnsNames: [member],
  usage: ["server", "client"],
});
const server = await issueCertificate(ca, {
  commonName: "server",
  dnsNames: [member, `${NAME}-client.${NS}.svc`],
  usage: ["server", "client"],
});
const operator = await issueCertificate(ca, { commonName: "etcd-operator", usage: ["client"] });
const backupClient = await issueCertificate(ca, { commonName: "etcd-backup", usage: ["client"] });
await createSecret(c, NS, "vault-peer", {
  "peer.crt": peer.cert,
  "peer.key": peer.key,
  "peer-ca.crt": ca.cert,
});
await createSecret(c, NS, "vault-server", {
  "server.crt": server.cert,
  "server.key": server.key,
  "server-ca.crt": ca.cert,
});
const clientSecret = (pair: { cert: string; key: string }) => ({
  "etcd-client.crt": pair.cert,
  "etcd-client.key": pair.key,
  "etcd-client-ca.crt": ca.cert,
});
await createSecret(c, NS, "vault-operator", clientSecret(operator));
await createSecret(c, NS, "vault-backup", clientSecret(backupClient));
// A serving certificate where a client one belongs: its extended key usage refuses client auth.
await createSecret(c, NS, "vault-not-a-client", {
  ...clientSecret(await issueCertificate(ca, { commonName: "x", dnsNames: ["x"], usage: ["server"] })),
});

const s3 = (key: string) => ({
  storageType: "S3",
  s3: { path: `backups/${key}`, awsSecret: "aws", endpoint: store.endpoint, forcePathStyle: true },
});

t.test("a TLS cluster is backed up with the client certificate of clientTLSSecret", async (t) => {
  await createCluster(c, NS, NAME, {
    size: 1,
    TLS: {
      static: {
        member: { peerSecret: "vault-peer", serverSecret: "vault-server" },
        operatorSecret: "vault-operator",
      },
    },
  });
  await waitReady(c, NS, NAME, 1, 120_000);
  const endpoints = [`https://${NAME}-client:2379`];

  await createBackup(c, NS, "with-tls", {
    etcdEndpoints: endpoints,
    clientTLSSecret: "vault-backup",
    ...s3("with-tls"),
  });
  const ok = await waitBackupOutcome(c, NS, "with-tls");
  t.equal(ok.succeeded, true, `the backup succeeded (${ok.reason ?? ""})`);
  t.ok((ok.backupSize ?? 0) > 0, `it holds ${ok.backupSize} bytes`);

  await createBackup(c, NS, "without-tls", { etcdEndpoints: endpoints, ...s3("without-tls") });
  const refused = await waitBackupOutcome(c, NS, "without-tls");
  t.equal(refused.succeeded, false, "without clientTLSSecret the members refuse the backup");
  t.match(refused.reason ?? "", /no healthy etcd member/);

  await createBackup(c, NS, "wrong-secret", {
    etcdEndpoints: endpoints,
    clientTLSSecret: "vault-not-a-client",
    ...s3("wrong-secret"),
  });
  const wrong = await waitBackupOutcome(c, NS, "wrong-secret");
  t.equal(wrong.succeeded, false);
  t.match(wrong.reason ?? "", /spec\.clientTLSSecret.*does not allow client authentication/);
});

// The backup suite on a TLS cluster: its keys are written and read with a client certificate,
// its backups taken with clientTLSSecret.
const ctx: BackupTestContext = {
  c,
  ns: NS,
  keys: 10_000,
  version: newestPatchOf("3.6") ?? "",
  tls: {
    ca: ca.cert,
    cert: backupClient.cert,
    key: backupClient.key,
    serverName: `${NAME}-client.${NS}.svc`,
  },
  clusterSpec: {
    TLS: {
      static: {
        member: { peerSecret: "vault-peer", serverSecret: "vault-server" },
        operatorSecret: "vault-operator",
      },
    },
  },
  backupSpec: { clientTLSSecret: "vault-backup" },
};
const suite = s3SuiteStore(store, "backups");
t.teardown(() => suite.store.close());

t.test(
  "a TLS cluster deleted is restored from its backup and serves TLS with the same secrets",
  async (t) => {
    // The round trip's cluster has the name the certificates were issued for.
    await deleteCluster(c, NS, NAME);
    await roundTrip(ctx, t, NAME, 3, under(suite, `${NAME}/etcd.backup`));
    const pods = (await c.core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${NAME}` }))
      .items;
    const etcdArgs = pods.map((p) =>
      (p.spec?.containers.find((x) => x.name === "etcd")?.command ?? []).join(" "),
    );
    t.equal(pods.length, 3, "three restored members");
    t.ok(
      etcdArgs.every(
        (a) => a.includes("--client-cert-auth=true") && a.includes("--peer-client-cert-auth=true"),
      ),
      "every restored member requires client certificates on both ports",
    );
    t.ok(
      etcdArgs.every((a) => /--initial-advertise-peer-urls=https:/.test(a)),
      "and speaks TLS to its peers",
    );
    const plain = new Etcd3({
      hosts: pods.map((p) => `http://${p.status?.podIP}:2379`),
      dialTimeout: 2_000,
    });
    const refused = await plain
      .get("key-00000")
      .string()
      .then(() => false)
      .catch(() => true);
    plain.close();
    t.ok(refused, "a client without TLS gets nothing from the restored cluster");
  },
);

t.test("a TLS cluster's corrupt, truncated or foreign backup is refused and the cluster untouched", (t) =>
  refusedRestoresTouchNothing(ctx, t, suite, NAME, false),
);

t.test("a TLS cluster whose every member is lost comes back from its newest backup, over TLS", (t) =>
  everyMemberLostRestored(ctx, t, NAME, 3),
);

// The self-signed serving certificate kept in a Secret (HTTP_TLS_SECRET), against a real
// kube-apiserver: replicas starting together store one certificate between them, a Secret declared
// empty (as the chart and the kustomize base declare it) is filled, a change of hosts makes a new
// one, and two HTTP servers started with it serve the same certificate, whose CA is the one in the
// webhook configuration's caBundle.
import { X509Certificate } from "node:crypto";
import { connect } from "node:tls";
import { AdmissionregistrationV1Api } from "@kubernetes/client-node";
import pino from "pino";
import t from "tap";
import { startHttp } from "../infra/http/server.ts";
import { sharedSelfSignedTls, TLS_HOSTS_ANNOTATION } from "../infra/http/shared-tls.ts";
import { validatingWebhookConfiguration } from "../infra/http/webhook-configuration.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor } from "../infra/local/kube-wait.ts";
import { loadConfig } from "../shared/config.ts";

const NS = "default";
const cluster = await startLocalCluster({ name: "http-shared-tls" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const hosts = ["etcd-operator-http.default.svc", "127.0.0.1"];

t.test("replicas starting together store one certificate between them", async (t) => {
  const replica = () => sharedSelfSignedTls(core, NS, "together-tls", hosts);
  const [a, b, c] = await Promise.all([replica(), replica(), replica()]);
  t.equal(a.caCert, b.caCert, "the same CA");
  t.equal(a.caCert, c.caCert, "for all three");
  t.equal(a.cert, c.cert, "and the same certificate");
  const secret = await core.readNamespacedSecret({ namespace: NS, name: "together-tls" });
  t.equal(Buffer.from(secret.data?.["ca.crt"] ?? "", "base64").toString(), a.caCert, "the one stored");
  t.equal(secret.metadata?.annotations?.[TLS_HOSTS_ANNOTATION], hosts.join(","), "for these hosts");
  const again = await sharedSelfSignedTls(core, NS, "together-tls", hosts);
  t.equal(again.cert, a.cert, "a restart serves it again");
});

t.test("a Secret declared empty is filled, and a change of hosts makes a new certificate", async (t) => {
  await core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: "declared-tls" } } });
  const first = await sharedSelfSignedTls(core, NS, "declared-tls", hosts);
  const names = new X509Certificate(first.cert).subjectAltName ?? "";
  t.match(names, /DNS:etcd-operator-http\.default\.svc/, "valid for the Service's name");
  t.match(names, /IP Address:127\.0\.0\.1/, "and the IP");
  const moved = ["etcd-operator-http.ops.svc"];
  const second = await sharedSelfSignedTls(core, NS, "declared-tls", moved);
  t.not(second.cert, first.cert, "new hosts, a new certificate");
  t.match(new X509Certificate(second.cert).subjectAltName ?? "", /DNS:etcd-operator-http\.ops\.svc/);
  t.equal((await sharedSelfSignedTls(core, NS, "declared-tls", moved)).cert, second.cert, "then kept");
});

t.test("two HTTP servers serve the same certificate, trusted by the webhook's caBundle", async (t) => {
  const webhookName = "shared-tls-webhook";
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  await admission.createValidatingWebhookConfiguration({
    body: validatingWebhookConfiguration({ name: webhookName, target: { url: "https://127.0.0.1:1" } }),
  });
  const config = loadConfig({
    MY_POD_NAMESPACE: NS,
    REDIS_URL: cluster.redisUrl,
    HTTP_PORT: "0",
    HTTP_HOST: "127.0.0.1",
    HTTP_TLS_SELF_SIGNED: "true",
    HTTP_TLS_HOSTS: "127.0.0.1",
    HTTP_TLS_SECRET: "servers-tls",
    WEBHOOK_CONFIGURATION: webhookName,
  });
  const log = pino({ level: "silent" });
  const servers = await Promise.all([1, 2].map(() => startHttp({ kc, config, log })));
  t.teardown(async () => {
    for (const server of servers) await server.close();
  });
  const stored = await admission.readValidatingWebhookConfiguration({ name: webhookName });
  const ca = Buffer.from(stored.webhooks?.[0]?.clientConfig.caBundle ?? "", "base64").toString();
  const served = await Promise.all(
    servers.map(
      (server) =>
        new Promise<string>((resolve, reject) => {
          // Verified against the caBundle's CA only, as kube-apiserver verifies a webhook.
          const socket = connect({ host: "127.0.0.1", port: server.port, ca }, () => {
            resolve(socket.getPeerX509Certificate()?.fingerprint256 ?? "");
            socket.end();
          });
          socket.on("error", reject);
        }),
    ),
  );
  t.ok(served[0], "the first server's certificate is trusted by the caBundle's CA");
  t.equal(served[1], served[0], "the second serves the same one");
});

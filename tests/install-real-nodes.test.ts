// The operator installed as users install it: the image built from the Dockerfile, `helm install`
// of charts/etcd-operator with its bundled Redis, on three real nodes (containerd, kubelet,
// kube-proxy, CoreDNS). Then what a user does with kubectl: the example cluster, kubectl scale,
// a member pod deleted, an upgrade, a node lost, the operator's pods deleted mid-scale, the
// webhook and the HTTP trigger through their Service, a backup to an S3 store in the cluster and
// the seeds' restore from it, and `helm uninstall`; then the same
// operator from each kustomize overlay (kubectl apply -k). The node is lost
// first, while the three members are one per node; the rest runs on the two nodes left.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Agent, request } from "node:https";
import { CreateBucketCommand, HeadObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { CustomObjectsApi, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import t, { type Test } from "tap";
import { parse } from "yaml";
import { buildOperatorImage } from "../infra/image/build.ts";
import { fullImageName, versitygwImage } from "../infra/image/cluster-images.ts";
import { ensureAssets } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { ensureHelm } from "../infra/local/helm.ts";
import { clientsFor, eventsFor, isReady, waitFor } from "../infra/local/kube-wait.ts";
import { endpointStatuses } from "../shared/etcd-members.ts";
import { Kube } from "../shared/kube.ts";
import {
  awsSecretData,
  createSecret,
  fillKeyspace,
  waitBackupOutcome,
  waitRestore,
} from "./helpers/backups.ts";
import { getCluster, memberEndpoints, patchSpec, waitReady } from "./helpers/clusters.ts";

const NS = "etcd-operator";
const RELEASE = "eop";
const EXAMPLE = "example-etcd-cluster";
/** What the backup test writes first, so that the backup is still streaming when the operator goes. */
const FILL_BYTES = 96 * 1024 * 1024;
const image = await buildOperatorImage({ progress: (line) => t.comment(line) });
const assets = await ensureAssets({ only: ["kubernetes", "etcd", "node", "coredns", "versitygw"] });
const local = await startLocalCluster({
  name: "e2e-helm",
  realNodes: 3,
  redis: false,
  nodeImages: [image.archive],
});
t.teardown(() => local.stop());
const { kc, core, apps } = clientsFor(local.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const c = { kube: new Kube(kc), core, custom };

function run(command: string, args: string[], input?: string): string {
  try {
    return execFileSync(command, args, {
      encoding: "utf8",
      input,
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, KUBECONFIG: local.kubeconfigPath },
    });
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr ?? "";
    throw new Error(`${command} ${args.join(" ")} failed: ${stderr.trim()}`, { cause: error });
  }
}
const kubectl = (...args: string[]) => run(assets.kubectl, args);
/** kubectl apply of one object, piped in as a user pipes a manifest. */
const apply = (namespace: string, object: object) =>
  run(assets.kubectl, ["apply", "--namespace", namespace, "-f", "-"], JSON.stringify(object));

/** What kubectl said when it refused to apply the object; "" when it applied it. */
function applyError(namespace: string, object: object): string {
  try {
    apply(namespace, object);
    return "";
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

function etcdCluster(name: string, spec: object, annotations: Record<string, string> = {}) {
  return {
    apiVersion: "etcd.database.coreos.com/v1beta2",
    kind: "EtcdCluster",
    metadata: { name, annotations },
    spec,
  };
}
const helmBinary = await ensureHelm({ log: (line) => t.comment(line) });
const helm = (...args: string[]) => run(helmBinary, args);

/** The HTTP server's pods that are not being deleted. */
async function httpPods() {
  return (
    await core.listNamespacedPod({ namespace: NS, labelSelector: "app.kubernetes.io/component=http" })
  ).items.filter((p) => !p.metadata?.deletionTimestamp);
}

async function membersOf(name: string) {
  return (
    await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` })
  ).items.filter((p) => !p.metadata?.deletionTimestamp);
}

t.test("helm install with values that cannot work fails with the chart's message", async (t) => {
  let refusal = "";
  try {
    helm(
      "install",
      "bad",
      "charts/etcd-operator",
      "--namespace",
      "bad-values",
      "--create-namespace",
      "--set",
      "redis.bundled=false",
    );
  } catch (error) {
    refusal = error instanceof Error ? error.message : String(error);
  }
  t.match(
    refusal,
    /redis\.url is required when redis\.bundled is false/,
    "no Redis and no redis.url: refused",
  );
  t.throws(() => helm("status", "bad", "--namespace", "bad-values"), /not found/, "no release was made");
  t.notMatch(kubectl("get", "namespaces", "-o", "name"), /namespace\/bad-values\b/, "nor its namespace");
});

t.test("helm install: the operator's pods run the built image and are Ready", async (t) => {
  const out = helm(
    "install",
    RELEASE,
    "charts/etcd-operator",
    "--namespace",
    NS,
    "--create-namespace",
    "--set",
    `image.tag=${image.name.split(":").at(-1)}`,
    // A lost node's members are replaced after 20 s instead of a minute.
    "--set",
    "config.extraEnv[0].name=MEMBER_UNHEALTHY_GRACE_MS",
    "--set-string",
    "config.extraEnv[0].value=20000",
    "--wait",
    "--timeout",
    "300s",
  );
  t.match(out, /STATUS: deployed/, "the release is deployed");
  const deployments = (await apps.listNamespacedDeployment({ namespace: NS })).items;
  t.ok(deployments.length >= 4, `controller, worker, http and redis deployments (${deployments.length})`);
  for (const d of deployments)
    t.equal(d.status?.readyReplicas, d.spec?.replicas, `${d.metadata?.name}: every replica Ready`);
  const pods = (await core.listNamespacedPod({ namespace: NS })).items;
  const images = new Set(
    pods.flatMap((p) => p.spec?.containers.map((x) => fullImageName(x.image ?? "")) ?? []),
  );
  t.ok(images.has(image.name), `the operator runs ${image.name}`);
  t.ok(
    pods.every((p) => p.spec?.serviceAccountName?.startsWith(RELEASE) || p.metadata?.name?.includes("redis")),
    "with the chart's ServiceAccount",
  );
});

t.test("the seeds' example cluster applied with kubectl becomes Available", async (t) => {
  kubectl("apply", "--namespace", NS, "-f", "manifests/examples/example-etcd-cluster.yaml");
  await waitReady(c, NS, EXAMPLE, 3, 180_000);
  const pods = await membersOf(EXAMPLE);
  t.equal(pods.length, 3, "3 member pods");
  t.equal(new Set(pods.map((p) => p.spec?.nodeName)).size, 3, "one per node");
  const cluster = await getCluster(c, NS, EXAMPLE);
  t.equal(cluster.status?.conditions?.find((x) => x.type === "Available")?.status, "True", "Available");
});

t.test("a whole node lost: quorum kept, its member re-created on another node", async (t) => {
  const pods = await membersOf(EXAMPLE);
  t.equal(new Set(pods.map((p) => p.spec?.nodeName)).size, 3, "one member per node before the loss");
  // The operator's own pods leave a lost node after 30 s (the chart's tolerations) and start
  // elsewhere, so whichever node goes, the operator comes back: the node is picked at random.
  const lostNode = pods[Math.floor(Math.random() * pods.length)]?.spec?.nodeName ?? "";
  const onIt = (await core.listNamespacedPod({ namespace: NS, fieldSelector: `spec.nodeName=${lostNode}` }))
    .items;
  t.comment(`losing ${lostNode}, with ${onIt.map((p) => p.metadata?.name).join(", ")}`);
  const lostMember = pods.find((p) => p.spec?.nodeName === lostNode)?.metadata?.name ?? "";
  await local.loseNode(lostNode);
  const replaced = await waitFor(
    `the member on ${lostNode} replaced`,
    async () => {
      const now = await membersOf(EXAMPLE);
      const names = now.map((p) => p.metadata?.name);
      if (names.includes(lostMember) || now.length !== 3) return undefined;
      const statuses = await endpointStatuses(await memberEndpoints(c, NS, EXAMPLE), { timeoutMs: 2000 });
      return statuses.filter((s) => s.ok).length >= 3 ? now : undefined;
    },
    { timeoutMs: 240_000, intervalMs: 1000 },
  );
  t.notOk(
    replaced.some((p) => p.spec?.nodeName === lostNode),
    `no member left on ${lostNode}; the new one runs on ${replaced.map((p) => p.spec?.nodeName).join(", ")}`,
  );
  await waitReady(c, NS, EXAMPLE, 3, 60_000);
  t.pass("the status counts 3 ready members");
  // What an administrator does once the machine is known to be gone: its pods then go too.
  kubectl("delete", "node", lostNode);
  await waitFor(
    `the pods of ${lostNode} to be gone`,
    async () => {
      const left = (await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${lostNode}` })).items;
      return left.length === 0 ? true : undefined;
    },
    { timeoutMs: 120_000 },
  );
  t.pass(`after kubectl delete node ${lostNode}, no pod is left on it`);
});

t.test("the webhook, called by kube-apiserver through its Service, refuses an invalid cluster", async (t) => {
  // After the node's loss the webhook's pod may still be starting elsewhere; until then kube-apiserver
  // cannot call it, and failurePolicy Fail refuses every change.
  const refused = await waitFor(
    "the webhook to answer",
    async () => {
      const message = applyError(NS, etcdCluster("bad", { size: 3, version: "2.3.8" }));
      return message.includes("failed calling webhook") ? undefined : message || "applied";
    },
    { timeoutMs: 120_000, intervalMs: 1000 },
  );
  t.match(refused, /admission webhook .* denied the request/, "kubectl apply refused by the webhook");
});

t.test("the webhook keeps answering while one of its two HTTP pods is deleted", async (t) => {
  await waitFor(
    "both HTTP pods Ready",
    async () => ((await httpPods()).filter(isReady).length === 2 ? true : undefined),
    { timeoutMs: 120_000, intervalMs: 500 },
  );
  const [victim] = await httpPods();
  kubectl("delete", "pod", "--namespace", NS, victim?.metadata?.name ?? "", "--wait=false");
  // Every apply until a new pod has replaced it: each refused by the webhook, none for want of one.
  const answers: string[] = [];
  const until = Date.now() + 20_000;
  while (Date.now() < until) {
    answers.push(applyError(NS, etcdCluster("bad", { size: 3, version: "2.3.8" })));
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  const unanswered = answers.filter((a) => !/admission webhook .* denied the request/.test(a));
  t.same(unanswered, [], `all ${answers.length} applies were refused by the webhook itself`);
});

t.test("kubectl scale 3 → 5 → 3, the operator's pods deleted in the middle", async (t) => {
  kubectl("scale", "--namespace", NS, `etcdcluster/${EXAMPLE}`, "--replicas=5");
  await waitFor(
    "a fourth member to be added",
    async () => ((await membersOf(EXAMPLE)).length >= 4 ? true : undefined),
    {
      timeoutMs: 60_000,
      intervalMs: 200,
    },
  );
  kubectl("delete", "pods", "--namespace", NS, "-l", "app.kubernetes.io/instance=eop", "--wait=false");
  await waitReady(c, NS, EXAMPLE, 5, 240_000);
  t.equal((await membersOf(EXAMPLE)).length, 5, "5 members after the operator came back");
  kubectl("scale", "--namespace", NS, `etcdcluster/${EXAMPLE}`, "--replicas=3");
  await waitReady(c, NS, EXAMPLE, 3, 180_000);
  await waitFor(
    "two member pods to go",
    async () => ((await membersOf(EXAMPLE)).length === 3 ? true : undefined),
    {
      timeoutMs: 60_000,
    },
  );
  t.pass("scaled back to 3");
});

t.test("a member pod deleted is replaced", async (t) => {
  const [victim] = await membersOf(EXAMPLE);
  const name = victim?.metadata?.name ?? "";
  kubectl("delete", "pod", "--namespace", NS, name, "--wait=false");
  await waitFor(
    `${name} replaced`,
    async () => {
      const names = (await membersOf(EXAMPLE)).map((p) => p.metadata?.name);
      return names.length === 3 && !names.includes(name) ? true : undefined;
    },
    { timeoutMs: 120_000 },
  );
  await waitReady(c, NS, EXAMPLE, 3, 120_000);
  t.pass(`${name} replaced by a new member`);
});

t.test("the manual trigger over HTTP, through the chart's Service", async (t) => {
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespacedServiceAccount({ namespace: NS, body: { metadata: { name: "trigger" } } });
  await rbac.createNamespacedRole({
    namespace: NS,
    body: {
      metadata: { name: "trigger" },
      rules: [
        { apiGroups: ["etcd.database.coreos.com"], resources: ["etcdclusters"], verbs: ["get", "update"] },
      ],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: NS,
    body: {
      metadata: { name: "trigger" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "trigger" },
      subjects: [{ kind: "ServiceAccount", name: "trigger", namespace: NS }],
    },
  });
  const token = (
    await core.createNamespacedServiceAccountToken({
      namespace: NS,
      name: "trigger",
      body: { spec: { audiences: [] } },
    })
  ).status?.token;
  const service = await core.readNamespacedService({ namespace: NS, name: `${RELEASE}-etcd-operator-http` });
  const url = `https://${service.spec?.clusterIP}:443/v1/namespaces/${NS}/etcdclusters/${EXAMPLE}/reconcile`;
  // The chart's certificate is self-signed for the Service's DNS names; the host has no cluster DNS.
  const status = await new Promise<number>((resolve, reject) => {
    const req = request(url, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      agent: new Agent({ rejectUnauthorized: false }),
    });
    req.on("response", (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on("error", reject);
    req.end();
  });
  t.equal(status, 202, "POST …/reconcile answers 202 through the ClusterIP");
});

t.test("an upgrade 3.5 → 3.6 applied with kubectl", async (t) => {
  apply(NS, etcdCluster("upgrade", { size: 3, version: "3.5.35" }));
  await waitReady(c, NS, "upgrade", 3, 180_000);
  await patchSpec(c, NS, "upgrade", { version: "3.6.16" });
  const versions = await waitFor(
    "every member on 3.6.16",
    async () => {
      const statuses = await endpointStatuses(await memberEndpoints(c, NS, "upgrade"), { timeoutMs: 2000 });
      const v = statuses.map((s) => s.version);
      return v.length === 3 && v.every((x) => x === "3.6.16") ? v : undefined;
    },
    { timeoutMs: 300_000, intervalMs: 1000 },
  );
  t.same(versions, ["3.6.16", "3.6.16", "3.6.16"], "all three members run 3.6.16");
  const reasons = (await eventsFor(core, NS, "upgrade")).map((e) => e.reason);
  t.ok(reasons.includes("MemberUpgraded"), "MemberUpgraded Events");
  kubectl("delete", "etcdcluster", "--namespace", NS, "upgrade", "--wait=true");
});

t.test(
  "a backup to an S3 store running in the cluster, with the operator's pods deleted, and a restore from it",
  async (t) => {
    // The store: versitygw's image, as a Deployment and Service beside the clusters.
    const access = {
      accessKeyId: "backupuser",
      secretAccessKey: randomBytes(18).toString("base64url"),
      region: "us-east-1",
    };
    await core.createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: { name: "s3-root" },
        stringData: {
          ROOT_ACCESS_KEY_ID: access.accessKeyId,
          ROOT_SECRET_ACCESS_KEY: access.secretAccessKey,
        },
      },
    });
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "s3" },
        spec: {
          selector: { matchLabels: { app: "s3" } },
          template: {
            metadata: { labels: { app: "s3" } },
            spec: {
              containers: [
                {
                  name: "versitygw",
                  image: versitygwImage(assets.versitygw),
                  imagePullPolicy: "IfNotPresent",
                  args: [
                    "--port",
                    ":7070",
                    "--region",
                    access.region,
                    "--health",
                    "/health",
                    "posix",
                    "/data",
                  ],
                  envFrom: [{ secretRef: { name: "s3-root" } }],
                  readinessProbe: { httpGet: { path: "/health", port: 7070 } },
                  volumeMounts: [{ name: "data", mountPath: "/data" }],
                },
              ],
              volumes: [{ name: "data", emptyDir: {} }],
            },
          },
        },
      },
    });
    await core.createNamespacedService({
      namespace: NS,
      body: { metadata: { name: "s3" }, spec: { selector: { app: "s3" }, ports: [{ port: 7070 }] } },
    });
    kubectl("rollout", "status", "--namespace", NS, "deployment/s3", "--timeout=120s");
    const service = await core.readNamespacedService({ namespace: NS, name: "s3" });
    const s3 = new S3Client({
      endpoint: `http://${service.spec?.clusterIP}:7070`,
      region: access.region,
      forcePathStyle: true,
      credentials: { accessKeyId: access.accessKeyId, secretAccessKey: access.secretAccessKey },
    });
    await waitFor("the store to take a bucket", async () =>
      s3.send(new CreateBucketCommand({ Bucket: "etcd-backups" })).then(() => true),
    );
    await createSecret(c, NS, "aws", awsSecretData(access));

    const etcd = new Etcd3({ hosts: await memberEndpoints(c, NS, EXAMPLE) });
    t.teardown(() => etcd.close());
    await etcd.put("before-backup").value("kept");
    // Enough data that the operator's pods can be deleted while the snapshot streams to the store.
    const filled = await fillKeyspace(etcd, FILL_BYTES);
    // The seeds' example, with the store's in-cluster address.
    const backup = parse(readFileSync("manifests/examples/example-etcd-backup-s3.yaml", "utf8")) as {
      metadata: { name: string };
      spec: { s3: Record<string, unknown> };
    };
    backup.spec.s3.endpoint = "http://s3.etcd-operator.svc:7070";
    backup.spec.s3.forcePathStyle = true;
    const logsSince = Date.now();
    const secondsSince = (start: number) => Math.ceil((Date.now() - start) / 1000) + 1;
    apply(NS, backup);
    // Every operator pod goes once a member says it is sending the snapshot: mid-way.
    const sender = await waitFor(
      "a member to start sending its snapshot",
      async () => {
        for (const pod of await membersOf(EXAMPLE)) {
          const name = pod.metadata?.name ?? "";
          const log = await core
            .readNamespacedPodLog({ namespace: NS, name, sinceSeconds: secondsSince(logsSince) })
            .catch(() => "");
          if (String(log).includes("sending database snapshot to client")) return name;
        }
        return undefined;
      },
      { timeoutMs: 120_000, intervalMs: 100 },
    );
    kubectl(
      "delete",
      "pods",
      "--namespace",
      NS,
      "-l",
      `app.kubernetes.io/instance=${RELEASE}`,
      "--wait=false",
    );
    t.not(
      (await c.kube.getBackup(NS, backup.metadata.name))?.status?.succeeded,
      true,
      `the operator's pods were deleted while ${sender} sent the snapshot, before the backup was done`,
    );
    const status = await waitBackupOutcome(c, NS, backup.metadata.name, {
      timeoutMs: 240_000,
      intervalMs: 1000,
    });
    t.equal(status.succeeded, true, "the backup succeeded with the operator's pods deleted");
    const stored = await s3.send(
      new HeadObjectCommand({ Bucket: "etcd-backups", Key: "example-etcd-cluster.backup" }),
    );
    t.ok(
      (stored.ContentLength ?? 0) > FILL_BYTES,
      `the whole snapshot is in the store (${stored.ContentLength} bytes)`,
    );

    kubectl("delete", "etcdbackup", "--namespace", NS, backup.metadata.name);

    // The seeds' EtcdRestore from that backup: the cluster comes back with what the backup held.
    // Applied once the operator's pods are back: until its HTTP pod is, the webhook refuses it.
    kubectl("rollout", "status", "--namespace", NS, "deployment", "--timeout=180s");
    await etcd.put("after-backup").value("not in the backup");
    const restore = parse(readFileSync("manifests/examples/example-etcd-restore.yaml", "utf8")) as {
      metadata: { name: string };
      spec: { s3: Record<string, unknown> };
    };
    restore.spec.s3.endpoint = "http://s3.etcd-operator.svc:7070";
    restore.spec.s3.forcePathStyle = true;
    apply(NS, restore);
    const done = await waitRestore(c, NS, restore.metadata.name, "Completed", 300_000);
    t.equal(done.status?.phase, "Completed", "the seeds' EtcdRestore completed");
    await waitReady(c, NS, EXAMPLE, 3, 180_000);
    const restored = new Etcd3({ hosts: await memberEndpoints(c, NS, EXAMPLE) });
    t.teardown(() => restored.close());
    t.equal(await restored.get("before-backup").string(), "kept", "what the backup held is back");
    t.equal(await restored.get("after-backup").string(), null, "what came after the backup is not");
    t.equal(
      await restored.getAll().prefix("fill/").count(),
      filled,
      `all ${filled} MiB filled before the backup are back`,
    );
    kubectl("delete", "etcdrestore", "--namespace", NS, restore.metadata.name);
    kubectl("delete", "deployment/s3", "service/s3", "secret/s3-root", "secret/aws", "--namespace", NS);
  },
);

t.test("helm uninstall and deleting the cluster leave nothing of the operator", async (t) => {
  kubectl("delete", "etcdcluster", "--namespace", NS, EXAMPLE, "--wait=true", "--timeout=120s");
  helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "120s");
  const left = kubectl(
    "get",
    "deployments,services,configmaps,secrets,roles,rolebindings",
    "--namespace",
    NS,
    "-o",
    "name",
  )
    .split("\n")
    .filter((line) => line && !line.includes("kube-root-ca.crt") && !line.includes("/trigger"));
  t.same(left, [], "no deployment, service, configmap, secret or RBAC of the release");
  const webhooks = kubectl("get", "validatingwebhookconfigurations", "-o", "name");
  t.notMatch(webhooks, /etcd-operator/, "the webhook configuration is gone");
  const crds = kubectl("get", "crds", "-o", "name");
  t.match(
    crds,
    /etcdclusters\.etcd\.database\.coreos\.com/,
    "the CRDs stay (Helm keeps crds/), as users expect",
  );
});

/** Installs an overlay with kubectl -k, proves it manages a cluster, and deletes it again. */
async function overlayRoundTrip(
  t: Test,
  overlay: "namespaced" | "cluster-wide",
  clusterNamespace: string,
  annotations: Record<string, string>,
): Promise<void> {
  kubectl("apply", "--server-side", "-f", "manifests/crds/");
  kubectl("apply", "-k", `manifests/overlays/${overlay}`);
  kubectl("rollout", "status", "--namespace", NS, "deployment", "--timeout=300s");
  const pods = (await core.listNamespacedPod({ namespace: NS })).items;
  t.ok(
    pods.some((p) => p.spec?.containers.some((x) => fullImageName(x.image ?? "") === image.name)),
    `${overlay}: the operator runs ${image.name}`,
  );
  const name = `${overlay}-example`;
  apply(clusterNamespace, etcdCluster(name, { size: 3, version: "3.6.16" }, annotations));
  await waitReady(c, clusterNamespace, name, 3, 180_000);
  kubectl("scale", "--namespace", clusterNamespace, `etcdcluster/${name}`, "--replicas=5");
  await waitReady(c, clusterNamespace, name, 5, 180_000);
  t.pass(`${overlay}: a cluster in ${clusterNamespace} made and scaled to 5`);
  const refused = applyError(
    clusterNamespace,
    etcdCluster("bad", { size: 3, version: "2.3.8" }, annotations),
  );
  t.match(
    refused,
    /admission webhook .* denied the request/,
    `${overlay}: the webhook refuses an invalid cluster`,
  );
  kubectl("delete", "etcdcluster", "--namespace", clusterNamespace, name, "--wait=true", "--timeout=120s");
  kubectl("delete", "-k", `manifests/overlays/${overlay}`, "--wait=true", "--timeout=180s");
  const webhooks = kubectl("get", "validatingwebhookconfigurations", "-o", "name");
  t.notMatch(webhooks, /etcd-operator/, `${overlay}: kubectl delete -k removes the webhook configuration`);
  const namespaces = kubectl("get", "namespaces", "-o", "name");
  t.notMatch(namespaces, new RegExp(`namespace/${NS}\\b`), `${overlay}: and the operator's namespace`);
}

t.test("kubectl apply -k manifests/overlays/namespaced", async (t) => {
  await overlayRoundTrip(t, "namespaced", NS, {});
});

t.test(
  "kubectl apply -k manifests/overlays/cluster-wide: a clusterwide-annotated cluster in another namespace",
  async (t) => {
    await core.createNamespace({ body: { metadata: { name: "team-a" } } });
    await overlayRoundTrip(t, "cluster-wide", "team-a", { "etcd.database.coreos.com/scope": "clusterwide" });
  },
);

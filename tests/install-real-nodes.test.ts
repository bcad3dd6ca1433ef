// The operator installed as users install it, on three real nodes (containerd, kubelet,
// kube-proxy, CoreDNS): the image built from the Dockerfile, then three times the same user's
// journey, once per way of installing it: `helm install` of charts/etcd-operator with its bundled
// Redis, `kubectl apply -k manifests/overlays/namespaced`, and `kubectl apply -k
// manifests/overlays/cluster-wide` with the clusters in another namespace. The journey: the seeds'
// example cluster, a whole node lost (then replaced by a new machine), the webhook through its
// Service and while one of its pods restarts, kubectl scale with the operator's pods deleted
// mid-way, a member pod deleted, the HTTP trigger through the Service, an upgrade, the seeds'
// backup to an S3 store in the cluster with the operator's pods deleted mid-snapshot and the
// seeds' restore from it, and the uninstall.
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
import { SCOPE_ANNOTATION, SCOPE_CLUSTERWIDE } from "../shared/api/etcd-cluster.ts";
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

// Three installations' journeys take about 18 minutes here, beyond the 15 every other file gets.
t.setTimeout(35 * 60_000);

/** Where every installation runs the operator (the overlays' fixed namespace; the chart's release). */
const NS = "etcd-operator";
const RELEASE = "eop";
const EXAMPLE = "example-etcd-cluster";
/** Every operator pod of every installation (controller, worker, HTTP, Redis); no member has it. */
const OPERATOR_PODS = "app.kubernetes.io/name=etcd-operator";
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
const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
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
const helmBinary = await ensureHelm({ log: (line) => t.comment(line) });
const helm = (...args: string[]) => run(helmBinary, args);

/** What kubectl said when it refused to apply the object; "" when it applied it. */
function applyError(namespace: string, object: object): string {
  try {
    apply(namespace, object);
    return "";
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/** One way users install the operator, and where their clusters then go. */
interface Installation {
  /** Names the journey's tests. */
  label: string;
  /** Installs the operator and waits until its Deployments are rolled out. */
  install(): void;
  /** Removes the operator as its users would. */
  uninstall(): void;
  httpService: string;
  /** What the operator's pods (Redis aside) run as. */
  serviceAccount: string;
  /** The namespace of the users' EtcdClusters, backups and restores, and what marks them this operator's. */
  namespace: string;
  annotations: Record<string, string>;
  /** Redis is the chart's bundled Sentinel group (a StatefulSet of three) instead of one Deployment. */
  sentinel?: boolean;
}

interface Manifest {
  metadata: { name: string; annotations?: Record<string, string> };
  spec: Record<string, unknown> & { s3?: Record<string, unknown> };
}

/** One of the seeds' examples as a user of this installation applies it: with its annotations. */
function example(inst: Installation, file: string): Manifest {
  const manifest = parse(readFileSync(`manifests/examples/${file}`, "utf8")) as Manifest;
  if (Object.keys(inst.annotations).length > 0)
    manifest.metadata.annotations = { ...manifest.metadata.annotations, ...inst.annotations };
  return manifest;
}

function etcdCluster(inst: Installation, name: string, spec: object) {
  return {
    apiVersion: "etcd.database.coreos.com/v1beta2",
    kind: "EtcdCluster",
    metadata: { name, annotations: inst.annotations },
    spec,
  };
}

/** The HTTP server's pods that are not being deleted. */
async function httpPods() {
  return (
    await core.listNamespacedPod({ namespace: NS, labelSelector: "app.kubernetes.io/component=http" })
  ).items.filter((p) => !p.metadata?.deletionTimestamp);
}

async function membersOf(namespace: string, name: string) {
  return (await core.listNamespacedPod({ namespace, labelSelector: `etcd_cluster=${name}` })).items.filter(
    (p) => !p.metadata?.deletionTimestamp,
  );
}

/** The bundled Redis group's pods, by name. */
function redisPodNames(): string[] {
  return kubectl(
    "get",
    "pods",
    "--namespace",
    NS,
    "-l",
    "app.kubernetes.io/component=redis",
    "-o",
    "jsonpath={.items[*].metadata.name}",
  )
    .split(" ")
    .filter(Boolean);
}

/** A SENTINEL command asked of the sentinel container of `pod`, its answer's lines. */
function askSentinel(pod: string, ...command: string[]): string[] {
  return kubectl(
    "exec",
    "--namespace",
    NS,
    pod,
    "-c",
    "sentinel",
    "--",
    "redis-cli",
    "-p",
    "26379",
    "SENTINEL",
    ...command,
  )
    .trim()
    .split("\n");
}

/** The pod of the Redis server the bundled sentinels name as primary (asked in a sentinel container). */
function sentinelPrimary(): string {
  for (const pod of redisPodNames()) {
    try {
      const host = askSentinel(pod, "get-master-addr-by-name", "mymaster")[0] ?? "";
      if (host) return host.split(".")[0] ?? "";
    } catch {
      // That pod's sentinel is not up: ask the next.
    }
  }
  return "";
}

/** What each bundled Redis pod's init container (infra/redis-sentinel-init.ts) said. */
function redisInitLogs(): { pod: string; log: string }[] {
  return redisPodNames().map((pod) => ({
    pod,
    log: kubectl("logs", "--namespace", NS, pod, "-c", "config").trim(),
  }));
}

/** Each sentinel's view of the group (primary, flags, replicas and other sentinels it knows). */
function sentinelViews(): Record<string, Record<string, string> | string> {
  const views: Record<string, Record<string, string> | string> = {};
  for (const pod of redisPodNames()) {
    try {
      const lines = askSentinel(pod, "MASTER", "mymaster");
      const view: Record<string, string> = {};
      for (let i = 0; i + 1 < lines.length; i += 2) view[lines[i] ?? ""] = lines[i + 1] ?? "";
      const state = view["failover-state"];
      views[pod] = {
        ip: view.ip ?? "",
        flags: view.flags ?? "",
        replicas: view["num-slaves"] ?? "",
        sentinels: view["num-other-sentinels"] ?? "",
        ...(state ? { "failover-state": state } : {}),
      };
    } catch (error) {
      views[pod] = `no answer: ${String(error).split("\n")[0]}`;
    }
  }
  return views;
}

/** Every sentinel of the three knows the two others and both replicas: a failover can happen. */
function sentinelsFormed(): boolean {
  const views = Object.values(sentinelViews());
  return (
    views.length === 3 &&
    views.every(
      (v) => typeof v !== "string" && v.replicas === "2" && v.sentinels === "2" && v.flags === "master",
    )
  );
}

/** Waits until a failover can happen (sentinelsFormed), printing each sentinel's view if it never does. */
async function sentinelsToForm(): Promise<void> {
  await waitFor(
    "the sentinels to know each other and both replicas",
    async () => sentinelsFormed() || undefined,
    {
      timeoutMs: 90_000,
      intervalMs: 2_000,
      describe: async () => JSON.stringify(sentinelViews()),
    },
  );
}

/** The HTTP pods' readiness and their last "not ready" log lines (what their /readyz said). */
async function httpPodsDiagnosis(): Promise<string> {
  const lines: string[] = [];
  for (const pod of await httpPods()) {
    const name = pod.metadata?.name ?? "";
    let log = "";
    try {
      log = kubectl("logs", "--namespace", NS, name, "--tail=200")
        .split("\n")
        .filter((line) => line.includes("not ready"))
        .slice(-3)
        .join("\n");
    } catch (error) {
      log = `no logs: ${String(error).split("\n")[0]}`;
    }
    lines.push(`${name} ready=${isReady(pod)} ${pod.status?.phase ?? ""}\n${log}`);
  }
  return lines.join("\n");
}

/** The replication role ("master" or "slave") the Redis server of `pod` reports. */
function redisRole(pod: string): string {
  return (
    kubectl("exec", "--namespace", NS, pod, "-c", "redis", "--", "redis-cli", "ROLE").trim().split("\n")[0] ??
    ""
  );
}

/** Deletes every pod of the operator at once, as a node drain or a bad rollout would. */
function deleteOperatorPods(): void {
  kubectl("delete", "pods", "--namespace", NS, "-l", OPERATOR_PODS, "--wait=false");
}

/** The operator's pods run the built image and every Deployment's replicas are Ready. */
async function checkRunning(t: Test, inst: Installation): Promise<void> {
  const deployments = (await apps.listNamespacedDeployment({ namespace: NS })).items;
  t.equal(
    deployments.length,
    inst.sentinel ? 3 : 4,
    `${inst.label}: controller, worker, HTTP${inst.sentinel ? "" : " and Redis"} deployments`,
  );
  for (const d of deployments)
    t.equal(d.status?.readyReplicas, d.spec?.replicas, `${d.metadata?.name}: every replica Ready`);
  if (inst.sentinel) {
    const sets = (await apps.listNamespacedStatefulSet({ namespace: NS })).items;
    t.equal(sets.length, 1, "the Redis Sentinel group's StatefulSet");
    t.equal(sets[0]?.status?.readyReplicas, 3, "its three pods Ready");
    t.match(sentinelPrimary(), /-redis-\d$/, "the sentinels name a primary");
  }
  const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: OPERATOR_PODS })).items;
  const images = new Set(
    pods.flatMap((p) => p.spec?.containers.map((x) => fullImageName(x.image ?? "")) ?? []),
  );
  t.ok(images.has(image.name), `the operator runs ${image.name}`);
  const accounts = new Set(
    pods
      .filter((p) => p.metadata?.labels?.["app.kubernetes.io/component"] !== "redis")
      .map((p) => p.spec?.serviceAccountName),
  );
  t.same([...accounts], [inst.serviceAccount], `as the ServiceAccount ${inst.serviceAccount}`);
}

/** versitygw's image as a Deployment and Service beside the clusters, with a bucket for backups. */
async function startStoreInCluster(namespace: string) {
  const access = {
    accessKeyId: "backupuser",
    secretAccessKey: randomBytes(18).toString("base64url"),
    region: "us-east-1",
  };
  await core.createNamespacedSecret({
    namespace,
    body: {
      metadata: { name: "s3-root" },
      stringData: { ROOT_ACCESS_KEY_ID: access.accessKeyId, ROOT_SECRET_ACCESS_KEY: access.secretAccessKey },
    },
  });
  await apps.createNamespacedDeployment({
    namespace,
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
                args: ["--port", ":7070", "--region", access.region, "--health", "/health", "posix", "/data"],
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
    namespace,
    body: { metadata: { name: "s3" }, spec: { selector: { app: "s3" }, ports: [{ port: 7070 }] } },
  });
  kubectl("rollout", "status", "--namespace", namespace, "deployment/s3", "--timeout=120s");
  const service = await core.readNamespacedService({ namespace, name: "s3" });
  const s3 = new S3Client({
    endpoint: `http://${service.spec?.clusterIP}:7070`,
    region: access.region,
    forcePathStyle: true,
    credentials: { accessKeyId: access.accessKeyId, secretAccessKey: access.secretAccessKey },
  });
  await waitFor("the store to take a bucket", async () =>
    s3.send(new CreateBucketCommand({ Bucket: "etcd-backups" })).then(() => true),
  );
  await createSecret(c, namespace, "aws", awsSecretData(access));
  return { s3, endpoint: `http://s3.${namespace}.svc:7070` };
}

/** A ServiceAccount allowed to trigger a reconcile of the namespace's clusters, and its token. */
async function triggerToken(namespace: string): Promise<string> {
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: "trigger" } } });
  await rbac.createNamespacedRole({
    namespace,
    body: {
      metadata: { name: "trigger" },
      rules: [
        { apiGroups: ["etcd.database.coreos.com"], resources: ["etcdclusters"], verbs: ["get", "update"] },
      ],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: "trigger" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "trigger" },
      subjects: [{ kind: "ServiceAccount", name: "trigger", namespace }],
    },
  });
  const token = (
    await core.createNamespacedServiceAccountToken({
      namespace,
      name: "trigger",
      body: { spec: { audiences: [] } },
    })
  ).status?.token;
  if (!token) throw new Error("the API server returned no token for the trigger ServiceAccount");
  return token;
}

/** What a user does with the installed operator, from the example cluster to the uninstall. */
function journey(inst: Installation): void {
  const ns = inst.namespace;
  const label = inst.label;

  t.test(`${label}: the operator's pods run the built image and are Ready`, async (t) => {
    inst.install();
    await checkRunning(t, inst);
  });

  t.test(`${label}: the seeds' example cluster applied with kubectl becomes Available`, async (t) => {
    apply(ns, example(inst, "example-etcd-cluster.yaml"));
    await waitReady(c, ns, EXAMPLE, 3, 180_000);
    const pods = await membersOf(ns, EXAMPLE);
    t.equal(pods.length, 3, "3 member pods");
    t.equal(new Set(pods.map((p) => p.spec?.nodeName)).size, 3, "one per node");
    const cluster = await getCluster(c, ns, EXAMPLE);
    t.equal(cluster.status?.conditions?.find((x) => x.type === "Available")?.status, "True", "Available");
  });

  t.test(`${label}: a whole node lost: quorum kept, its member re-created on another node`, async (t) => {
    const pods = await membersOf(ns, EXAMPLE);
    t.equal(new Set(pods.map((p) => p.spec?.nodeName)).size, 3, "one member per node before the loss");
    // The operator's own pods leave a lost node after 30 s (the installations' tolerations) and
    // start elsewhere, so whichever node goes, the operator comes back: the node is picked at random,
    // except with the bundled Sentinel group, where it is the Redis primary's node (the hardest
    // case: the operator follows a failover while it replaces the member).
    let lostNode = pods[Math.floor(Math.random() * pods.length)]?.spec?.nodeName ?? "";
    if (inst.sentinel) {
      // The group started moments ago, with the install. A primary lost before the sentinels know
      // its replicas and each other cannot be failed over (docs/operations.md): the loss comes once
      // the group has formed, as in the primary's deletion below.
      await sentinelsToForm();
      const primary = await core.readNamespacedPod({ namespace: NS, name: sentinelPrimary() });
      lostNode = primary.spec?.nodeName ?? lostNode;
    }
    const onIt = (await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${lostNode}` })).items;
    t.comment(`losing ${lostNode}, with ${onIt.map((p) => p.metadata?.name).join(", ")}`);
    const lostMember = pods.find((p) => p.spec?.nodeName === lostNode)?.metadata?.name ?? "";
    await local.loseNode(lostNode);
    const lostAt = Date.now();
    const since = () => `${((Date.now() - lostAt) / 1000).toFixed(0)} s after the loss`;
    const replaced = await waitFor(
      `the member on ${lostNode} replaced`,
      async () => {
        const now = await membersOf(ns, EXAMPLE);
        const names = now.map((p) => p.metadata?.name);
        if (names.includes(lostMember) || now.length !== 3) return undefined;
        const statuses = await endpointStatuses(await memberEndpoints(c, ns, EXAMPLE), { timeoutMs: 2000 });
        return statuses.filter((s) => s.ok).length >= 3 ? now : undefined;
      },
      {
        timeoutMs: 240_000,
        intervalMs: 1000,
        describe: async () =>
          `${inst.sentinel ? `sentinels ${JSON.stringify(sentinelViews())}; ` : ""}${await httpPodsDiagnosis()}`,
      },
    );
    t.notOk(
      replaced.some((p) => p.spec?.nodeName === lostNode),
      `no member left on ${lostNode}; the new one runs on ${replaced.map((p) => p.spec?.nodeName).join(", ")}`,
    );
    t.comment(`member replaced and healthy ${since()}`);
    await waitReady(c, ns, EXAMPLE, 3, 60_000);
    t.pass("the status counts 3 ready members");
    // What an administrator does once the machine is known to be gone: the node, then its pods
    // (Kubernetes' pod GC would remove them too, after a 40 s quarantine and up to 20 s more).
    kubectl("delete", "node", lostNode);
    kubectl(
      "delete",
      "pods",
      "--all-namespaces",
      "--field-selector",
      `spec.nodeName=${lostNode}`,
      "--force",
      "--grace-period=0",
    );
    await waitFor(
      `the pods of ${lostNode} to be gone`,
      async () => {
        const left = (await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${lostNode}` }))
          .items;
        return left.length === 0 ? true : undefined;
      },
      { timeoutMs: 120_000 },
    );
    t.pass(`after kubectl delete node and its pods, no pod is left on ${lostNode} (${since()})`);
    // A new machine takes its place, so that every installation starts on three nodes.
    await local.replaceNode(lostNode);
    t.comment(`${lostNode} replaced ${since()}`);
    const node = await core.readNode({ name: lostNode });
    t.ok(
      node.status?.conditions?.some((x) => x.type === "Ready" && x.status === "True"),
      `${lostNode} is back as a new machine, Ready`,
    );
  });

  t.test(
    `${label}: the webhook, called by kube-apiserver through its Service, refuses an invalid cluster`,
    async (t) => {
      // After the node's loss the webhook's pod may still be starting elsewhere; until then
      // kube-apiserver cannot call it, and failurePolicy Fail refuses every change.
      const refused = await waitFor(
        "the webhook to answer",
        async () => {
          const message = applyError(ns, etcdCluster(inst, "bad", { size: 3, version: "2.3.8" }));
          return message.includes("failed calling webhook") ? undefined : message || "applied";
        },
        { timeoutMs: 120_000, intervalMs: 1000 },
      );
      t.match(refused, /admission webhook .* denied the request/, "kubectl apply refused by the webhook");
    },
  );

  t.test(`${label}: the webhook keeps answering while one of its two HTTP pods is deleted`, async (t) => {
    await waitFor(
      "both HTTP pods Ready",
      async () => ((await httpPods()).filter(isReady).length === 2 ? true : undefined),
      {
        timeoutMs: 120_000,
        intervalMs: 500,
        describe: async () =>
          `${inst.sentinel ? `sentinels ${JSON.stringify(sentinelViews())}; ` : ""}${await httpPodsDiagnosis()}`,
      },
    );
    const [victim] = await httpPods();
    kubectl("delete", "pod", "--namespace", NS, victim?.metadata?.name ?? "", "--wait=false");
    // Every apply until a new pod has replaced it: each refused by the webhook, none for want of one.
    const answers: string[] = [];
    const until = Date.now() + 20_000;
    while (Date.now() < until) {
      answers.push(applyError(ns, etcdCluster(inst, "bad", { size: 3, version: "2.3.8" })));
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const unanswered = answers.filter((a) => !/admission webhook .* denied the request/.test(a));
    t.same(unanswered, [], `all ${answers.length} applies were refused by the webhook itself`);
  });

  /** kubectl scale to 5, returning once a fourth member is there (the scale still under way). */
  async function scaleToFiveUntilAFourthMember(): Promise<void> {
    kubectl("scale", "--namespace", ns, `etcdcluster/${EXAMPLE}`, "--replicas=5");
    await waitFor(
      "a fourth member to be added",
      async () => ((await membersOf(ns, EXAMPLE)).length >= 4 ? true : undefined),
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  }

  /** kubectl scale back to 3, returning once the cluster is Ready with three member pods. */
  async function scaleBackToThree(): Promise<void> {
    kubectl("scale", "--namespace", ns, `etcdcluster/${EXAMPLE}`, "--replicas=3");
    await waitReady(c, ns, EXAMPLE, 3, 180_000);
    await waitFor(
      "two member pods to go",
      async () => ((await membersOf(ns, EXAMPLE)).length === 3 ? true : undefined),
      { timeoutMs: 60_000 },
    );
  }

  t.test(`${label}: kubectl scale 3 → 5 → 3, the operator's pods deleted in the middle`, async (t) => {
    await scaleToFiveUntilAFourthMember();
    deleteOperatorPods();
    await waitReady(c, ns, EXAMPLE, 5, 240_000);
    t.equal((await membersOf(ns, EXAMPLE)).length, 5, "5 members after the operator came back");
    if (inst.sentinel) {
      // Every Redis pod came back empty: one the sentinels named as primary must not wait for a
      // failover that no replica could give.
      const inits = redisInitLogs();
      t.equal(inits.length, 3, "three Redis pods, each configured by its init container");
      for (const { pod, log } of inits) {
        t.comment(`${pod}: ${log.replace(/\n/g, "; ")}`);
        t.match(log, /starts as (the primary|a replica of)/, `${pod}: configured`);
        if (/still name/.test(log))
          t.match(
            log,
            /no other server holds data/,
            `${pod}: did not wait for a failover that could not come`,
          );
      }
    }
    await scaleBackToThree();
    t.pass("scaled back to 3");
  });

  if (inst.sentinel) {
    t.test(`${label}: the Redis primary's pod deleted during a scale: a replica takes over`, async (t) => {
      // The step before deleted all three Redis pods: a failover needs the group formed again (each
      // sentinel learns the others from the primary's hello messages and the replicas from its
      // INFO, every 2 and 10 s).
      await sentinelsToForm();
      const primary = sentinelPrimary();
      await scaleToFiveUntilAFourthMember();
      kubectl("delete", "pod", "--namespace", NS, primary, "--wait=false");
      const promoted = await waitFor(
        "the sentinels to promote a replica",
        async () => {
          const now = sentinelPrimary();
          return now && now !== primary ? now : undefined;
        },
        {
          timeoutMs: 90_000,
          intervalMs: 1_000,
          describe: async () =>
            `${JSON.stringify(sentinelViews())}; pods: ${kubectl("get", "pods", "--namespace", NS, "-l", "app.kubernetes.io/component=redis", "-o", "wide")}`,
        },
      );
      t.not(promoted, primary, `${promoted} promoted after ${primary} was deleted`);
      await waitReady(c, ns, EXAMPLE, 5, 240_000);
      t.equal((await membersOf(ns, EXAMPLE)).length, 5, "the scale finished on the new primary");
      await waitFor(
        `${primary} back as a replica`,
        async () => {
          try {
            return redisRole(primary) === "slave" ? true : undefined;
          } catch {
            return undefined;
          }
        },
        { timeoutMs: 180_000, intervalMs: 2_000 },
      );
      t.pass(`${primary} came back as a replica of ${promoted}`);
      await scaleBackToThree();
      t.pass("scaled back to 3");
    });
  }

  t.test(`${label}: a member pod deleted is replaced`, async (t) => {
    const [victim] = await membersOf(ns, EXAMPLE);
    const name = victim?.metadata?.name ?? "";
    kubectl("delete", "pod", "--namespace", ns, name, "--wait=false");
    await waitFor(
      `${name} replaced`,
      async () => {
        const names = (await membersOf(ns, EXAMPLE)).map((p) => p.metadata?.name);
        return names.length === 3 && !names.includes(name) ? true : undefined;
      },
      { timeoutMs: 120_000 },
    );
    await waitReady(c, ns, EXAMPLE, 3, 120_000);
    t.pass(`${name} replaced by a new member`);
  });

  t.test(`${label}: the manual trigger over HTTP, through the operator's Service`, async (t) => {
    // The Service routes only to Ready HTTP pods; when none is, say why (their own /readyz lines).
    await waitFor("an HTTP pod Ready", async () => ((await httpPods()).some(isReady) ? true : undefined), {
      timeoutMs: 90_000,
      intervalMs: 500,
      describe: async () => httpPodsDiagnosis(),
    });
    const token = await triggerToken(ns);
    const service = await core.readNamespacedService({ namespace: NS, name: inst.httpService });
    const url = `https://${service.spec?.clusterIP}:443/v1/namespaces/${ns}/etcdclusters/${EXAMPLE}/reconcile`;
    // The certificate is self-signed for the Service's DNS names; the host has no cluster DNS.
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

  t.test(`${label}: an upgrade 3.5 → 3.6 applied with kubectl`, async (t) => {
    apply(ns, etcdCluster(inst, "upgrade", { size: 3, version: "3.5.35" }));
    await waitReady(c, ns, "upgrade", 3, 180_000);
    await patchSpec(c, ns, "upgrade", { version: "3.6.16" });
    const versions = await waitFor(
      "every member on 3.6.16",
      async () => {
        const statuses = await endpointStatuses(await memberEndpoints(c, ns, "upgrade"), { timeoutMs: 2000 });
        const v = statuses.map((s) => s.version);
        return v.length === 3 && v.every((x) => x === "3.6.16") ? v : undefined;
      },
      { timeoutMs: 300_000, intervalMs: 1000 },
    );
    t.same(versions, ["3.6.16", "3.6.16", "3.6.16"], "all three members run 3.6.16");
    const reasons = (await eventsFor(core, ns, "upgrade")).map((e) => e.reason);
    t.ok(reasons.includes("MemberUpgraded"), "MemberUpgraded Events");
    kubectl("delete", "etcdcluster", "--namespace", ns, "upgrade", "--wait=true");
  });

  t.test(
    `${label}: the seeds' backup to an S3 store in the cluster, the operator's pods deleted mid-way, and the seeds' restore from it`,
    async (t) => {
      const store = await startStoreInCluster(ns);
      const etcd = new Etcd3({ hosts: await memberEndpoints(c, ns, EXAMPLE) });
      t.teardown(() => etcd.close());
      await etcd.put("before-backup").value("kept");
      // Enough data that the operator's pods can be deleted while the snapshot streams to the store.
      const filled = await fillKeyspace(etcd, FILL_BYTES);
      const backup = example(inst, "example-etcd-backup-s3.yaml");
      const s3Spec = { ...backup.spec.s3, endpoint: store.endpoint, forcePathStyle: true };
      backup.spec.s3 = s3Spec;
      const logsSince = Date.now();
      const secondsSince = (start: number) => Math.ceil((Date.now() - start) / 1000) + 1;
      apply(ns, backup);
      // Every operator pod goes once a member says it is sending the snapshot: mid-way.
      const sender = await waitFor(
        "a member to start sending its snapshot",
        async () => {
          for (const pod of await membersOf(ns, EXAMPLE)) {
            const name = pod.metadata?.name ?? "";
            const log = await core
              .readNamespacedPodLog({ namespace: ns, name, sinceSeconds: secondsSince(logsSince) })
              .catch(() => "");
            if (String(log).includes("sending database snapshot to client")) return name;
          }
          return undefined;
        },
        { timeoutMs: 120_000, intervalMs: 100 },
      );
      deleteOperatorPods();
      t.not(
        (await c.kube.getBackup(ns, backup.metadata.name))?.status?.succeeded,
        true,
        `the operator's pods were deleted while ${sender} sent the snapshot, before the backup was done`,
      );
      const status = await waitBackupOutcome(c, ns, backup.metadata.name, {
        timeoutMs: 240_000,
        intervalMs: 1000,
      });
      t.equal(status.succeeded, true, "the backup succeeded with the operator's pods deleted");
      const stored = await store.s3.send(
        new HeadObjectCommand({ Bucket: "etcd-backups", Key: "example-etcd-cluster.backup" }),
      );
      t.ok(
        (stored.ContentLength ?? 0) > FILL_BYTES,
        `the whole snapshot is in the store (${stored.ContentLength} bytes)`,
      );
      kubectl("delete", "etcdbackup", "--namespace", ns, backup.metadata.name);

      // The seeds' EtcdRestore from that backup: the cluster comes back with what the backup held.
      // Applied once the operator's pods are back: until its HTTP pod is, the webhook refuses it.
      kubectl("rollout", "status", "--namespace", NS, "deployment", "--timeout=180s");
      await etcd.put("after-backup").value("not in the backup");
      const restore = example(inst, "example-etcd-restore.yaml");
      restore.spec.s3 = { ...restore.spec.s3, endpoint: store.endpoint, forcePathStyle: true };
      apply(ns, restore);
      const done = await waitRestore(c, ns, restore.metadata.name, "Completed", 300_000);
      t.equal(done.status?.phase, "Completed", "the seeds' EtcdRestore completed");
      await waitReady(c, ns, EXAMPLE, 3, 180_000);
      const restored = new Etcd3({ hosts: await memberEndpoints(c, ns, EXAMPLE) });
      t.teardown(() => restored.close());
      t.equal(await restored.get("before-backup").string(), "kept", "what the backup held is back");
      t.equal(await restored.get("after-backup").string(), null, "what came after the backup is not");
      t.equal(
        await restored.getAll().prefix("fill/").count(),
        filled,
        `all ${filled} MiB filled before the backup are back`,
      );
      kubectl("delete", "etcdrestore", "--namespace", ns, restore.metadata.name);
      kubectl("delete", "deployment/s3", "service/s3", "secret/s3-root", "secret/aws", "--namespace", ns);
    },
  );

  t.test(`${label}: the uninstall and the cluster's deletion leave nothing of the operator`, async (t) => {
    kubectl("delete", "etcdcluster", "--namespace", ns, EXAMPLE, "--wait=true", "--timeout=120s");
    inst.uninstall();
    const webhooks = kubectl("get", "validatingwebhookconfigurations", "-o", "name");
    t.notMatch(webhooks, /etcd-operator/, "the webhook configuration is gone");
    const clusterRbac = kubectl("get", "clusterroles,clusterrolebindings", "-o", "name");
    t.notMatch(clusterRbac, /etcd-operator/, "and every ClusterRole and binding of the operator");
    const crds = kubectl("get", "crds", "-o", "name");
    t.match(crds, /etcdclusters\.etcd\.database\.coreos\.com/, "the CRDs stay, as users expect");
    t.equal((await membersOf(ns, EXAMPLE)).length, 0, "no member pod is left");
  });
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

journey({
  label: "helm",
  install() {
    helm(
      "install",
      RELEASE,
      "charts/etcd-operator",
      "--namespace",
      NS,
      "--create-namespace",
      "--set",
      `image.tag=${image.name.split(":").at(-1)}`,
      // Redis as production installs run it: the chart's own Sentinel group.
      "--set",
      "redis.sentinel.bundled=true",
      // A lost node's members are replaced after 20 s instead of a minute.
      "--set",
      "config.extraEnv[0].name=MEMBER_UNHEALTHY_GRACE_MS",
      "--set-string",
      "config.extraEnv[0].value=20000",
      "--wait",
      "--timeout",
      "300s",
    );
  },
  uninstall() {
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
    if (left.length > 0) throw new Error(`helm uninstall left ${left.join(", ")}`);
    // The namespace was made by --create-namespace; what the user made in it (the trigger's
    // ServiceAccount) goes with it, so that the overlays start where a new user would.
    kubectl("delete", "namespace", NS, "--wait=true", "--timeout=120s");
  },
  httpService: `${RELEASE}-etcd-operator-http`,
  serviceAccount: `${RELEASE}-etcd-operator`,
  namespace: NS,
  annotations: {},
  sentinel: true,
});

/** An overlay applied as its kustomization.yaml says, after the CRDs. */
function overlay(
  name: "namespaced" | "cluster-wide",
  namespace: string,
  annotations: Record<string, string>,
): Installation {
  return {
    label: `kubectl apply -k manifests/overlays/${name}`,
    install() {
      kubectl("apply", "--server-side", "-f", "manifests/crds/");
      kubectl("apply", "-k", `manifests/overlays/${name}`);
      kubectl("rollout", "status", "--namespace", NS, "deployment", "--timeout=300s");
      if (namespace !== NS) kubectl("create", "namespace", namespace);
    },
    uninstall() {
      kubectl("delete", "-k", `manifests/overlays/${name}`, "--wait=true", "--timeout=180s");
      if (kubectl("get", "namespaces", "-o", "name").match(new RegExp(`namespace/${NS}\\b`)))
        throw new Error(`kubectl delete -k left the namespace ${NS}`);
      if (namespace !== NS) kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=120s");
    },
    httpService: "etcd-operator-http",
    serviceAccount: "etcd-operator",
    namespace,
    annotations,
  };
}

journey(overlay("namespaced", NS, {}));
// The cluster-wide operator takes the clusters annotated for it, in any namespace.
journey(overlay("cluster-wide", "team-a", { [SCOPE_ANNOTATION]: SCOPE_CLUSTERWIDE }));

// `npm run demo`: the operator with an example 3-member EtcdCluster, for a newcomer.
//   npm run demo                     no KUBECONFIG: starts the embedded local control plane (etcd,
//                                    kube-apiserver, kube-controller-manager, Redis, process kubelet)
//   KUBECONFIG=... npm run demo      runs the operator against that cluster instead (Redis: REDIS_URL,
//                                    or a redis-server started for the demo)
//   npm run demo -- --real-nodes     real containerd/kubelet nodes instead of the process kubelet
//                  [--nodes N]       (default 3): the operator's image built from the Dockerfile and
//                                    installed with `helm install` of charts/etcd-operator, as users do
//   npm run demo -- --name N         the local instance's name (default "default"), so a test can run
//                                    its own demo beside other clusters
// Without Helm, installs the CRDs and runs the operator in this process (watcher, worker, resync scheduler, and the
// HTTP server when this build has it), applies manifests/examples/example-etcd-cluster.yaml, shows
// members joining, phase and conditions until the cluster is Available, prints how to use it
// (etcdctl, kubectl, the HTTP URL), and stops everything on Ctrl-C. Operator logs are pretty-printed.
import { randomBytes } from "node:crypto";
import { accessSync, constants, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { parseArgs } from "node:util";
import { CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { parse } from "yaml";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../../shared/api/etcd-cluster.ts";
import { loadConfig, type OperatorConfig } from "../../shared/config.ts";
import { httpStatusOf } from "../../shared/kube-errors.ts";
import { createLogger } from "../../shared/log.ts";
import { installCrds } from "../crds.ts";
import { type RunningOperator, startOperator } from "../operator.ts";
import { ensureAssets, newestEtcd, RUNTIME_ASSETS } from "./assets.ts";
import {
  DEMO_TRIGGER_ACCOUNT,
  type DemoTarget,
  existingClusterTarget,
  localTarget,
  realNodesTarget,
} from "./demo-targets.ts";
import { helmPath } from "./helm.ts";
import { waitFor } from "./kube-wait.ts";
import { DEFAULT_INSTANCE } from "./layout.ts";

const { values } = parseArgs({
  options: {
    name: { type: "string", default: DEFAULT_INSTANCE },
    "real-nodes": { type: "boolean", default: false },
    nodes: { type: "string", default: "3" },
  },
});
const nodes = Number(values.nodes);
if (!Number.isInteger(nodes) || nodes < 1)
  throw new Error(`--nodes takes a number of nodes, not "${values.nodes}"`);
const say = (line: string) => process.stderr.write(`\x1b[1m[demo]\x1b[0m ${line}\n`);

/**
 * The HTTP server's URL when this build's operator serves one. Read by key because the HTTP role
 * and its settings (issue 6) are built in parallel with this demo.
 */
function httpUrl(config: OperatorConfig): string | undefined {
  const settings = new Map<string, unknown>(Object.entries(config));
  const port = settings.get("httpPort");
  if (typeof port !== "number" || port <= 0) return undefined;
  const tls =
    settings.get("httpTlsSelfSigned") === true || typeof settings.get("httpTlsCertFile") === "string";
  return `${tls ? "https" : "http"}://127.0.0.1:${port}`;
}

/** A command line as the reader can paste it: a tool not on PATH is named by its full path. */
function onPath(binary: string): boolean {
  return (process.env.PATH ?? "").split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, binary), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

// Ctrl-C while the control plane starts must not leave its (detached) daemons behind: note it, let
// the start finish, then stop everything.
let interrupted = false;
const early = () => {
  interrupted = true;
  say("Ctrl-C: stopping as soon as the start-up step finishes");
};
process.on("SIGINT", early);
process.on("SIGTERM", early);

const assets = await ensureAssets({ only: RUNTIME_ASSETS, log: say });
const kubeconfigEnv = process.env.KUBECONFIG;
let target: DemoTarget;
try {
  target = kubeconfigEnv
    ? await existingClusterTarget(kubeconfigEnv, say)
    : values["real-nodes"]
      ? await realNodesTarget(values.name, nodes, say)
      : await localTarget(values.name, say);
} catch (error) {
  if (!interrupted) throw error;
  // Ctrl-C that lands while a daemon is being spawned kills that daemon too: the signal is already
  // pending in the forked child before it leaves our process group (setsid), and is delivered at
  // exec. The start then fails, and has stopped what it started: that is the stop the user asked for.
  say(`start-up ended by Ctrl-C (${error instanceof Error ? error.message : String(error)})`);
  say("everything stopped");
  process.exit(0);
}
process.off("SIGINT", early);
process.off("SIGTERM", early);
const custom = target.kc.makeApiClient(CustomObjectsApi);
let created: string | undefined;
let operator: RunningOperator | undefined;

// Whatever fails from here on, nothing the demo started may be left running.
let stopping = false;
async function shutdown(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    say(
      target.helmRelease
        ? "stopping the local control plane and its nodes"
        : `stopping the operator${target.local ? " and the local control plane" : ""}`,
    );
    await operator?.stop().catch(() => undefined);
    if (!target.local && created) {
      // On someone's cluster, leave nothing of the demo behind (its pods go with it).
      await custom
        .deleteNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: target.namespace,
          plural: PLURAL,
          name: created,
        })
        .catch(() => undefined);
      say(`deleted EtcdCluster ${target.namespace}/${created}`);
    }
    await target.stop().catch((error: unknown) => say(`stop failed: ${String(error)}`));
    say("everything stopped");
  }
  process.exit(code);
}
function fail(error: unknown): void {
  process.stderr.write(
    `demo failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  void shutdown(1);
}
process.on("uncaughtException", fail);
process.on("unhandledRejection", fail);
process.on("SIGINT", () => void shutdown(0));
process.on("SIGTERM", () => void shutdown(0));
if (interrupted) await shutdown(0);

// With Helm, the chart installed the CRDs and runs the operator in the cluster.
if (!target.helmRelease) {
  say("installing the CRDs");
  await installCrds(target.kc);
}
// The demo's HTTP API and dashboard take a token made here (or HTTP_STATIC_TOKEN), printed below
// for the person running it: a local convenience, not how a cluster install authenticates.
const demoToken = process.env.HTTP_STATIC_TOKEN || randomBytes(24).toString("hex");
const config = loadConfig({
  ...process.env,
  REDIS_URL: target.redisUrl,
  MY_POD_NAMESPACE: target.namespace,
  LOG_PRETTY: "true",
  HTTP_STATIC_TOKEN: demoToken,
});
const log = createLogger({ level: config.logLevel, pretty: true }).child({ component: "operator" });
if (!target.helmRelease) operator = await startOperator({ kc: target.kc, config, log });

const examplePath = new URL("../../manifests/examples/example-etcd-cluster.yaml", import.meta.url);
const example = parse(readFileSync(examplePath, "utf8")) as EtcdCluster;
const name = example.metadata.name ?? "example-etcd-cluster";
say(
  `applying manifests/examples/example-etcd-cluster.yaml (size ${example.spec.size}, etcd ${example.spec.version})`,
);
try {
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: target.namespace,
    plural: PLURAL,
    body: example,
  });
  created = name;
} catch (error) {
  if (httpStatusOf(error) !== 409) throw error;
  say(`EtcdCluster ${name} exists already: showing it`);
}

/** One line of what changed: phase, members, conditions and what the operator is doing. */
function progressLine(cluster: EtcdCluster): string {
  const status = cluster.status;
  const conditions = (status?.conditions ?? []).map((c) => `${c.type}=${c.status}`).join(" ");
  const doing =
    status?.conditions?.find((c) => c.type === "Progressing" && c.status === "True")?.message ?? "";
  return [
    `phase=${status?.phase || "-"}`,
    `members ready ${status?.readyMembers ?? 0}/${cluster.spec.size}`,
    status?.members?.ready?.length ? `(${status.members.ready.join(", ")})` : "",
    conditions,
    doing ? `· ${doing}` : "",
  ]
    .filter(Boolean)
    .join(" ");
}

let last = "";
const started = Date.now();
const ready = await waitFor(
  `${name} to become Available`,
  async () => {
    const current = (await custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: target.namespace,
      plural: PLURAL,
      name,
    })) as EtcdCluster;
    const line = progressLine(current);
    if (line !== last) say(line);
    last = line;
    const condition = (type: string) => current.status?.conditions?.find((c) => c.type === type)?.status;
    const done =
      condition("Available") === "True" &&
      condition("Progressing") === "False" &&
      current.status?.readyMembers === current.spec.size;
    return done ? current : undefined;
  },
  { timeoutMs: 300_000, intervalMs: 250 },
);

const core = target.kc.makeApiClient(CoreV1Api);

/** What to type next when the operator runs in the cluster: its release, logs and HTTP Service. */
async function inClusterLines(
  release: string,
  kubectl: string,
  ns: string,
  cluster: string,
): Promise<string[]> {
  const service = await core.readNamespacedService({ namespace: target.namespace, name: `${release}-http` });
  const reconcile = `https://${service.spec?.clusterIP}/v1/namespaces/${target.namespace}/etcdclusters/${cluster}/reconcile`;
  return [
    `  helm${ns} status ${release}`,
    `  ${kubectl}${ns} get pods -l app.kubernetes.io/instance=${release} -o wide   # the operator's pods`,
    `  ${kubectl}${ns} logs deploy/${release}-worker`,
    "",
    // The chart's certificate is self-signed for the Service's DNS names, which the host cannot resolve.
    `HTTP API through the chart's Service, with the token of a ServiceAccount that may update EtcdClusters:`,
    `  curl -k -X POST -H "Authorization: Bearer $(${kubectl}${ns} create token ${DEMO_TRIGGER_ACCOUNT})" ${reconcile}`,
  ];
}
const pods = await core.listNamespacedPod({
  namespace: target.namespace,
  labelSelector: `etcd_cluster=${name}`,
});
const endpoints = pods.items.map((p) => `http://${p.status?.podIP}:2379`).join(",");
const etcdctl = newestEtcd(assets).etcdctl;
// Locally the demo's own kubectl (aliased above); on an existing cluster, the reader's.
const kubectl = target.local || onPath("kubectl") ? "kubectl" : assets.kubectl;
const ns = target.namespace === "default" ? "" : ` -n ${target.namespace}`;
// The operator reports where its HTTP server listens when it runs one (the bound port, even for HTTP_PORT=0).
const served = new Map<string, unknown>(Object.entries(operator ?? {})).get("httpUrl");
const url = typeof served === "string" ? served : httpUrl(config);
const firstPod = pods.items[0]?.metadata?.name ?? `${name}-xxxx`;
process.stdout.write(
  [
    "",
    `EtcdCluster ${name} is Available after ${((Date.now() - started) / 1000).toFixed(1)} s: ${ready.status?.readyMembers} members, etcd ${ready.status?.currentVersion}.`,
    "",
    "Use it (in another terminal):",
    ...(target.local
      ? [
          `  export KUBECONFIG=${target.kubeconfigPath}`,
          `  alias kubectl=${assets.kubectl}   # v${assets.kubernetesVersion}, built for the demo`,
          ...(target.helmRelease ? [`  alias helm=${helmPath()}`] : []),
        ]
      : []),
    `  ${kubectl}${ns} get etcd                      # size, ready, version, phase`,
    `  ${kubectl}${ns} describe etcd ${name}  # conditions and Events`,
    `  ${kubectl}${ns} get pods -o wide`,
    `  ${kubectl}${ns} scale etcd/${name} --replicas=5`,
    ...(target.local
      ? [
          `  ${etcdctl} --endpoints=${endpoints} put hello world`,
          `  ${etcdctl} --endpoints=${endpoints} get hello`,
          `  ${etcdctl} --endpoints=${endpoints} member list -w table`,
        ]
      : [
          // Pod IPs are seldom reachable from outside a real cluster: use the etcdctl in a member's image.
          `  ${kubectl}${ns} exec ${firstPod} -- etcdctl put hello world`,
          `  ${kubectl}${ns} exec ${firstPod} -- etcdctl get hello`,
          `  ${kubectl}${ns} exec ${firstPod} -- etcdctl member list -w table`,
        ]),
    ...(target.helmRelease ? await inClusterLines(target.helmRelease, kubectl, ns, name) : []),
    ...(url && !target.helmRelease
      ? [
          "",
          `HTTP API: ${url} (OpenAPI at ${url}/openapi.json); the demo's token: ${demoToken}`,
          `  queue dashboard: ${url}/dashboard/ (log in with the token)`,
          `  reconcile now:   curl -X POST -H "Authorization: Bearer ${demoToken}" ${url}/v1/namespaces/${target.namespace}/etcdclusters/${name}/reconcile`,
        ]
      : []),
    "",
    target.helmRelease
      ? "The operator runs in the cluster, its queue in the chart's bundled Redis. Press Ctrl-C to stop everything."
      : `The queue (BullMQ) is in Redis at ${target.redisUrl}. Press Ctrl-C to stop everything.`,
    "",
  ].join("\n"),
);
// Keep the event loop alive until Ctrl-C (the operator's connections would, but do not rely on it).
setInterval(() => {}, 1 << 30);

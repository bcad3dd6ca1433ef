// `npm run demo`: the operator on the embedded local control plane, for a newcomer without a
// cluster. Starts etcd, kube-apiserver, kube-controller-manager, Redis and the process kubelet,
// installs the CRDs, runs the operator (watcher, worker and resync scheduler in this process),
// applies the example EtcdCluster, shows its progress until it is Available, prints how to use
// it, and stops everything on Ctrl-C.
import { readFileSync } from "node:fs";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { parse } from "yaml";
import { type EtcdCluster, GROUP, PLURAL, VERSION } from "../../shared/api/etcd-cluster.ts";
import { loadConfig } from "../../shared/config.ts";
import { createLogger } from "../../shared/log.ts";
import { installCrds } from "../crds.ts";
import { startOperator } from "../operator.ts";
import { ensureAssets, newestEtcd } from "./assets.ts";
import { startLocalCluster } from "./control-plane.ts";
import { clientsFor, waitFor } from "./kube-wait.ts";

const say = (line: string) => process.stderr.write(`\x1b[1m[demo]\x1b[0m ${line}\n`);
const assets = await ensureAssets({ log: say });
const cluster = await startLocalCluster({ log: say });
// Whatever fails from here on, the local cluster must not be left running.
process.on("uncaughtException", (error) => fail(error));
process.on("unhandledRejection", (error) => fail(error));
function fail(error: unknown): void {
  process.stderr.write(
    `demo failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  void cluster.stop().finally(() => process.exit(1));
}
const { kc } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
say("installing the CRDs");
await installCrds(kc);
const config = loadConfig({
  ...process.env,
  REDIS_URL: cluster.redisUrl,
  MY_POD_NAMESPACE: "default",
  LOG_PRETTY: "true",
});
const log = createLogger({ level: config.logLevel, pretty: true }).child({ component: "operator" });
const operator = await startOperator({ kc, config, log });

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  say("stopping the operator and the local control plane");
  void operator
    .stop()
    .then(() => cluster.stop())
    .then(() => process.exit(0));
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);

const examplePath = new URL("../../manifests/examples/example-etcd-cluster.yaml", import.meta.url);
const example = parse(readFileSync(examplePath, "utf8")) as EtcdCluster;
const name = example.metadata.name ?? "example-etcd-cluster";
say(`applying ${examplePath.pathname.split("/").slice(-3).join("/")} (size ${example.spec.size})`);
await custom.createNamespacedCustomObject({
  group: GROUP,
  version: VERSION,
  namespace: "default",
  plural: PLURAL,
  body: example,
});

let last = "";
const started = Date.now();
const ready = await waitFor(
  `${name} to become Available`,
  async () => {
    const current = (await custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: "default",
      plural: PLURAL,
      name,
    })) as EtcdCluster;
    const progressing = current.status?.conditions?.find((c) => c.type === "Progressing");
    const line = `phase=${current.status?.phase || "-"} ready=${current.status?.readyMembers ?? 0}/${current.spec.size} ${progressing?.message ?? ""}`;
    if (line !== last) say(line);
    last = line;
    const available = current.status?.conditions?.find((c) => c.type === "Available")?.status === "True";
    return available && current.status?.readyMembers === current.spec.size && progressing?.status === "False"
      ? current
      : undefined;
  },
  { timeoutMs: 300_000, intervalMs: 250 },
);
const { core } = clientsFor(cluster.kubeconfigPath);
const pods = await core.listNamespacedPod({ namespace: "default", labelSelector: `etcd_cluster=${name}` });
const endpoints = pods.items.map((p) => `http://${p.status?.podIP}:2379`).join(",");
const etcd = newestEtcd(assets);
process.stdout.write(
  [
    "",
    `EtcdCluster ${name} is Available after ${((Date.now() - started) / 1000).toFixed(1)} s: ${ready.status?.readyMembers} members, etcd ${ready.status?.currentVersion}.`,
    "",
    `  export KUBECONFIG=${cluster.kubeconfigPath}`,
    "  kubectl get etcd                       # size, ready, version, phase",
    `  kubectl describe etcd ${name}  # conditions and Events`,
    `  kubectl scale etcd/${name} --replicas=5`,
    "  kubectl get pods -o wide",
    `  ${etcd.etcdctl} --endpoints=${endpoints} put hello world`,
    `  ${etcd.etcdctl} --endpoints=${endpoints} member list -w table`,
    "",
    `Queue (BullMQ) in Redis at ${cluster.redisUrl}. Press Ctrl-C to stop everything.`,
    "",
  ].join("\n"),
);

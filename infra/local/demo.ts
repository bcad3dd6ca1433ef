// `npm run demo`: the local control plane for a newcomer without a cluster. It starts etcd,
// kube-apiserver, kube-controller-manager, Redis and the process kubelet, runs an example etcd
// pod, prints how to look at it, and stops everything on Ctrl-C.
// (The operator itself joins this demo as it lands; see README.)

import { ensureAssets, newestEtcd } from "./assets.ts";
import { startLocalCluster } from "./control-plane.ts";
import { clientsFor, isReady, waitForPod } from "./kube-wait.ts";

const log = (line: string) => process.stderr.write(`[demo] ${line}\n`);
const assets = await ensureAssets({ log });
const cluster = await startLocalCluster({ log });
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  log("stopping everything");
  void cluster.stop().then(() => process.exit(0));
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);

const etcd = newestEtcd(assets);
const { core } = clientsFor(cluster.kubeconfigPath);
await core.createNamespacedPod({
  namespace: "default",
  body: {
    metadata: { name: "demo-etcd", namespace: "default", labels: { app: "demo-etcd" } },
    spec: {
      containers: [
        {
          name: "etcd",
          image: `quay.io/coreos/etcd:v${etcd.version}`,
          command: [
            "/usr/local/bin/etcd",
            "--listen-client-urls=http://0.0.0.0:2379",
            "--advertise-client-urls=http://demo-etcd:2379",
            "--data-dir=/var/etcd/data",
          ],
          readinessProbe: { httpGet: { path: "/health", port: 2379 }, periodSeconds: 2 },
          volumeMounts: [{ name: "data", mountPath: "/var/etcd" }],
        },
      ],
      volumes: [{ name: "data", emptyDir: {} }],
    },
  },
});
log("waiting for the example etcd pod to become Ready");
const pod = await waitForPod(core, "default", "demo-etcd", "Ready", isReady, 60_000);
const ip = pod.status?.podIP ?? "";
process.stdout.write(
  [
    "",
    `Local Kubernetes v${cluster.kubernetesVersion} is running (etcd builds: ${cluster.etcdVersions.join(", ")}).`,
    `  export KUBECONFIG=${cluster.kubeconfigPath}`,
    "  kubectl get nodes -o wide",
    "  kubectl get pods -o wide",
    `  ${etcd.etcdctl} --endpoints=http://${ip}:2379 put hello world`,
    `  ${etcd.etcdctl} --endpoints=http://${ip}:2379 get hello`,
    cluster.redisUrl ? `  Redis for the operator's queue: ${cluster.redisUrl}` : "",
    "",
    "Press Ctrl-C to stop everything.",
    "",
  ].join("\n"),
);
setInterval(() => {}, 1 << 30);

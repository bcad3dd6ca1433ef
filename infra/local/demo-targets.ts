// Where `npm run demo` runs the operator:
//   local        the embedded control plane with the process kubelet; the operator in the demo's
//                own process, Redis beside the control plane
//   real nodes   the embedded control plane with containerd/kubelet nodes; the operator built from
//                the Dockerfile and installed with `helm install` of charts/etcd-operator, as a
//                user installs it, with the chart's bundled Redis
//   existing     the cluster KUBECONFIG names; the operator in the demo's process, Redis from
//                REDIS_URL or one started for the demo
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { CoreV1Api, type KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { GROUP, PLURAL } from "../../shared/api/etcd-cluster.ts";
import { PooledKubeConfig } from "../../shared/kube-config.ts";
import { buildOperatorImage } from "../image/build.ts";
import { ensureAssets } from "./assets.ts";
import { startLocalCluster } from "./control-plane.ts";
import { stopDaemon } from "./daemons.ts";
import { ensureHelm } from "./helm.ts";
import { clientsFor } from "./kube-wait.ts";
import { startRedis } from "./redis.ts";

const run = promisify(execFile);

export interface DemoTarget {
  kubeconfigPath: string | undefined;
  kc: KubeConfig;
  /** The queue's Redis for an operator run by the demo; "" when the operator runs in the cluster. */
  redisUrl: string;
  namespace: string;
  /** The embedded control plane: stopping the demo stops the whole cluster. */
  local: boolean;
  /** Set when the operator runs in the cluster, installed with Helm: the release's name. */
  helmRelease?: string;
  stop(): Promise<void>;
}

export async function localTarget(name: string, say: (line: string) => void): Promise<DemoTarget> {
  const cluster = await startLocalCluster({ name, log: say });
  const { kc } = clientsFor(cluster.kubeconfigPath);
  return {
    kubeconfigPath: cluster.kubeconfigPath,
    kc,
    redisUrl: cluster.redisUrl ?? "",
    namespace: "default",
    local: true,
    stop: () => cluster.stop(),
  };
}

/** The release and namespace the demo installs the chart as (the chart's names are then "etcd-operator-…"). */
export const DEMO_RELEASE = "etcd-operator";

/** The ServiceAccount whose token the demo prints for the HTTP trigger. */
export const DEMO_TRIGGER_ACCOUNT = "demo-trigger";

/**
 * A ServiceAccount that may reconcile the namespace's EtcdClusters over HTTP: the trigger asks
 * Kubernetes whether its caller may `update` the cluster, which the operator's own account may not.
 */
async function createTriggerAccount(kc: KubeConfig, namespace: string): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const name = DEMO_TRIGGER_ACCOUNT;
  await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  await rbac.createNamespacedRole({
    namespace,
    body: {
      metadata: { name },
      rules: [{ apiGroups: [GROUP], resources: [PLURAL], verbs: ["get", "update"] }],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name, namespace }],
    },
  });
}

export async function realNodesTarget(
  name: string,
  nodes: number,
  say: (line: string) => void,
): Promise<DemoTarget> {
  say("building the operator's image from the Dockerfile (cached once built)");
  const image = await buildOperatorImage({ progress: say });
  const helm = await ensureHelm({ log: say });
  await ensureAssets({ only: ["kubernetes", "etcd", "node", "coredns"], log: say });
  const cluster = await startLocalCluster({
    name,
    log: say,
    realNodes: nodes,
    redis: false,
    nodeImages: [image.archive],
  });
  try {
    const { kc } = clientsFor(cluster.kubeconfigPath);
    say(`helm install ${DEMO_RELEASE} charts/etcd-operator (waits until the operator's pods are Ready)`);
    const installed = await run(
      helm,
      [
        "install",
        DEMO_RELEASE,
        "charts/etcd-operator",
        "--namespace",
        DEMO_RELEASE,
        "--create-namespace",
        "--set",
        `image.tag=${image.name.split(":").at(-1)}`,
        "--wait",
        "--timeout",
        "300s",
      ],
      { env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath } },
    );
    for (const line of installed.stdout.trim().split("\n")) say(`  ${line}`);
    await createTriggerAccount(kc, DEMO_RELEASE);
    return {
      kubeconfigPath: cluster.kubeconfigPath,
      kc,
      redisUrl: "",
      namespace: DEMO_RELEASE,
      local: true,
      helmRelease: DEMO_RELEASE,
      stop: () => cluster.stop(),
    };
  } catch (error) {
    await cluster.stop().catch(() => undefined);
    const stderr = (error as { stderr?: string }).stderr?.trim();
    throw new Error(`helm install failed${stderr ? `: ${stderr}` : ""}`, { cause: error });
  }
}

export async function existingClusterTarget(
  kubeconfig: string,
  say: (line: string) => void,
): Promise<DemoTarget> {
  const kc = new PooledKubeConfig();
  kc.loadFromDefault();
  say(`using the cluster of KUBECONFIG=${kubeconfig} (context ${kc.getCurrentContext()})`);
  const namespace =
    process.env.MY_POD_NAMESPACE || kc.getContextObject(kc.getCurrentContext())?.namespace || "default";
  if (process.env.REDIS_URL) {
    return {
      kubeconfigPath: kubeconfig,
      kc,
      redisUrl: process.env.REDIS_URL,
      namespace,
      local: false,
      stop: async () => {},
    };
  }
  // No Redis given: one for the demo's lifetime, its data in a temporary folder.
  const dir = mkdtempSync(join(tmpdir(), "etcd-operator-demo-redis-"));
  const redis = await startRedis({ dir, logFile: join(dir, "redis.log"), pidFile: join(dir, "redis.pid") });
  say(`started redis-server for the queue at ${redis.url}`);
  return {
    kubeconfigPath: kubeconfig,
    kc,
    redisUrl: redis.url,
    namespace,
    local: false,
    async stop() {
      await stopDaemon(redis.record);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

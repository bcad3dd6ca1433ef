// kubelet and kube-proxy of a real node, as kubeadm would configure them, each in the node's
// network namespace with its own client certificate (system:node:<name> for the Node authorizer,
// system:kube-proxy for the node-proxier role).
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import type { CertificateAuthority, KeyAndCert } from "../../../shared/pki.ts";
import { issueCertificate } from "../../../shared/pki.ts";
import type { NodeBuild } from "../assets.ts";
import { type PidRecord, startDaemon } from "../daemons.ts";
import { CLUSTER_DNS_IP, CLUSTER_DOMAIN, type RealNodeLayout } from "./layout.ts";

export interface AgentContext {
  node: RealNodeLayout;
  build: NodeBuild;
  ca: CertificateAuthority;
  caFile: string;
  apiserverUrl: string;
  logFile: (name: string) => string;
  pidFile: (name: string) => string;
}

function kubeconfig(server: string, caFile: string, identity: KeyAndCert): string {
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "local", cluster: { server, "certificate-authority": caFile } }],
    users: [
      {
        name: "node",
        user: { "client-certificate-data": b64(identity.cert), "client-key-data": b64(identity.key) },
      },
    ],
    contexts: [{ name: "local", context: { cluster: "local", user: "node" } }],
    "current-context": "local",
  });
}

async function writeKubeconfig(
  ctx: AgentContext,
  file: string,
  commonName: string,
  organizations: string[],
): Promise<string> {
  const identity = await issueCertificate(ctx.ca, { commonName, organizations, usage: ["client"] });
  const path = join(ctx.node.dir, file);
  writeFileSync(path, kubeconfig(ctx.apiserverUrl, ctx.caFile, identity), { mode: 0o600 });
  return path;
}

/**
 * Eviction and image garbage collection are set so they never act on this shared disk (tests
 * would see pods evicted for another process's files); swap is tolerated; cgroup v1 is allowed
 * (kubelet 1.34 still runs on it when told so). No host resolv.conf: pods get the cluster DNS only,
 * so nothing resolves (or is sent) beyond this machine.
 */
function kubeletConfig(ctx: AgentContext): Record<string, unknown> {
  return {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    address: ctx.node.ip,
    port: 10250,
    readOnlyPort: 0,
    healthzBindAddress: "127.0.0.1",
    healthzPort: 10248,
    authentication: {
      anonymous: { enabled: false },
      webhook: { enabled: true },
      x509: { clientCAFile: ctx.caFile },
    },
    authorization: { mode: "Webhook" },
    cgroupDriver: "cgroupfs",
    cgroupRoot: ctx.node.cgroupRoot,
    cgroupsPerQOS: true,
    enforceNodeAllocatable: ["pods"],
    failSwapOn: false,
    failCgroupV1: false,
    containerRuntimeEndpoint: `unix://${ctx.node.containerdSocket}`,
    clusterDNS: [CLUSTER_DNS_IP],
    clusterDomain: CLUSTER_DOMAIN,
    resolvConf: "",
    maxPods: 30,
    evictionHard: { "memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%" },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    serializeImagePulls: false,
    makeIPTablesUtilChains: false,
    // Containers' stdout/stderr logs, for `kubectl logs`: in the node's directory, not /var/log/pods.
    podLogsDir: join(ctx.node.dir, "pod-logs"),
    containerLogMaxSize: "10Mi",
    shutdownGracePeriod: "0s",
  };
}

export async function startKubelet(ctx: AgentContext): Promise<PidRecord> {
  const kubeconfigPath = await writeKubeconfig(ctx, "kubelet.kubeconfig", `system:node:${ctx.node.name}`, [
    "system:nodes",
  ]);
  const config = join(ctx.node.dir, "kubelet.yaml");
  writeFileSync(config, stringify(kubeletConfig(ctx)));
  return startDaemon({
    name: `${ctx.node.name} kubelet`,
    command: ctx.build.kubelet,
    args: [
      `--config=${config}`,
      `--kubeconfig=${kubeconfigPath}`,
      `--root-dir=${join(ctx.node.dir, "kubelet")}`,
      `--cert-dir=${join(ctx.node.dir, "kubelet-pki")}`,
      `--hostname-override=${ctx.node.name}`,
      `--node-ip=${ctx.node.ip}`,
      "--v=1",
    ],
    env: { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin" },
    logFile: ctx.logFile("kubelet"),
    pidFile: ctx.pidFile("kubelet"),
    netns: ctx.node.netns,
  });
}

export async function startKubeProxy(ctx: AgentContext, clusterCidr: string): Promise<PidRecord> {
  const kubeconfigPath = await writeKubeconfig(ctx, "kube-proxy.kubeconfig", "system:kube-proxy", []);
  return startDaemon({
    name: `${ctx.node.name} kube-proxy`,
    command: ctx.build.kubeProxy,
    args: [
      `--kubeconfig=${kubeconfigPath}`,
      `--hostname-override=${ctx.node.name}`,
      `--cluster-cidr=${clusterCidr}`,
      "--proxy-mode=iptables",
      // A namespace cannot raise the host's conntrack table size; leave it as it is.
      "--conntrack-max-per-core=0",
      "--nodeport-addresses=primary",
      "--metrics-bind-address=127.0.0.1:10249",
      "--healthz-bind-address=127.0.0.1:10256",
      "--v=1",
    ],
    env: { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin" },
    logFile: ctx.logFile("kube-proxy"),
    pidFile: ctx.pidFile("kube-proxy"),
    netns: ctx.node.netns,
  });
}

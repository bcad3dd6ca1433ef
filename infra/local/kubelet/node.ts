// The Node object the process kubelet registers: Ready, with the bridge address as InternalIP
// and the machine's real CPU and memory as capacity.
import { cpus, totalmem } from "node:os";
import type { V1Node, V1NodeCondition } from "@kubernetes/client-node";

export function nodeConditions(now: Date, ready: boolean): V1NodeCondition[] {
  const ok = (type: string, reason: string, message: string): V1NodeCondition => ({
    type,
    status: "False",
    reason,
    message,
    lastHeartbeatTime: now,
    lastTransitionTime: now,
  });
  return [
    ok("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ok("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ok("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    {
      type: "Ready",
      status: ready ? "True" : "False",
      reason: ready ? "KubeletReady" : "KubeletNotReady",
      message: ready ? "kubelet is posting ready status" : "kubelet is stopping",
      lastHeartbeatTime: now,
      lastTransitionTime: now,
    },
  ];
}

export function nodeObject(
  name: string,
  address: string,
  kubernetesVersion: string,
  podCidr: string,
): V1Node {
  const capacity = {
    cpu: String(cpus().length),
    memory: `${Math.floor(totalmem() / 1024)}Ki`,
    pods: "250",
    "ephemeral-storage": "100Gi",
  };
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name,
      labels: {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node-role.kubernetes.io/local": "",
      },
    },
    spec: { podCIDR: podCidr, podCIDRs: [podCidr] },
    status: {
      capacity,
      allocatable: capacity,
      addresses: [
        { type: "InternalIP", address },
        { type: "Hostname", address: name },
      ],
      conditions: nodeConditions(new Date(), true),
      daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
      nodeInfo: {
        architecture: "amd64",
        bootID: "",
        containerRuntimeVersion: "etcd-operator-local://1",
        kernelVersion: "",
        kubeProxyVersion: "",
        kubeletVersion: `v${kubernetesVersion}`,
        machineID: "",
        operatingSystem: "linux",
        osImage: "etcd-operator process kubelet",
        systemUUID: "",
      },
    },
  };
}

// Unit tests of the member pod builder: where each spec.pod field lands, and the choices the
// operator makes when the user gives none (spread members, emptyDir, the DNS wait).
import t from "tap";
import type { EtcdCluster, NormalizedSpec } from "../shared/api/etcd-cluster.ts";
import { memberClaim, memberHost, memberPod } from "../shared/member-pods.ts";

const cluster = {
  apiVersion: "etcd.database.coreos.com/v1beta2",
  kind: "EtcdCluster",
  metadata: { name: "c", namespace: "ns", uid: "u-1" },
  spec: { size: 3 },
} as EtcdCluster;

function podFor(pod: NormalizedSpec["pod"]) {
  const spec: NormalizedSpec = {
    size: 3,
    repository: "quay.io/coreos/etcd",
    version: "3.6.16",
    paused: false,
    pod,
  };
  return memberPod({ cluster, spec, name: "c-abc", initialCluster: [], state: "existing" });
}

t.test("the user's affinity is used as given; antiAffinity and the default spread otherwise", async (t) => {
  const affinity = {
    nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } },
  };
  t.same(podFor({ affinity, antiAffinity: true }).spec?.affinity, affinity);
  t.ok(
    podFor({ antiAffinity: true }).spec?.affinity?.podAntiAffinity
      ?.requiredDuringSchedulingIgnoredDuringExecution,
  );
  t.ok(podFor({}).spec?.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution);
  t.notOk(podFor({}).spec?.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution);
});

t.test("data: an emptyDir, or the member's own claim owned by the cluster", async (t) => {
  t.same(podFor({}).spec?.volumes, [{ name: "etcd-data", emptyDir: {} }]);
  const claimSpec = { storageClassName: "fast", resources: { requests: { storage: "2Gi" } } };
  t.same(podFor({ persistentVolumeClaimSpec: claimSpec }).spec?.volumes, [
    { name: "etcd-data", persistentVolumeClaim: { claimName: "c-abc-pvc" } },
  ]);
  const spec = {
    size: 3,
    repository: "r",
    version: "3.6.16",
    paused: false,
    pod: { persistentVolumeClaimSpec: claimSpec },
  };
  const claim = memberClaim(cluster, spec, "c-abc");
  t.equal(claim.metadata?.name, "c-abc-pvc");
  t.same(claim.metadata?.labels, { app: "etcd", etcd_cluster: "c", etcd_member: "c-abc" });
  t.equal(claim.metadata?.ownerReferences?.[0]?.uid, "u-1");
  t.same(
    claim.spec,
    { accessModes: ["ReadWriteOnce"], ...claimSpec },
    "ReadWriteOnce unless the spec says otherwise",
  );
});

t.test("the DNS wait gets the host and timeout as variables, never inside its script", async (t) => {
  const init = podFor({ DNSTimeoutInSecond: 30, ClusterDomain: "cluster.local" }).spec?.initContainers?.[0];
  t.equal(init?.image, "busybox:1.28.0-glibc", "coreos's default image");
  t.same(init?.env, [
    { name: "MEMBER_HOST", value: "c-abc.c.ns.svc.cluster.local" },
    { name: "TIMEOUT_SECONDS", value: "30" },
  ]);
  t.notMatch(init?.command?.join(" "), /c-abc/, "the script itself names no host");
  t.equal(memberHost("m", "c", "ns", ".cluster.local"), "m.c.ns.svc.cluster.local");
  t.equal(memberHost("m", "c", "ns"), "m.c.ns.svc");
});

t.test("etcdArgs follow the operator's flags", async (t) => {
  const command = podFor({ etcdArgs: ["--log-level=warn"] }).spec?.containers[0]?.command ?? [];
  t.equal(command.at(-1), "--log-level=warn");
  t.equal(command[0], "/usr/local/bin/etcd");
});

t.test("with ClusterDomain, TLS certificates must cover the longer member names", async (t) => {
  const { requiredNames } = await import("../shared/tls-secrets.ts");
  t.equal(requiredNames("c", "ns", ".cluster.local").member.name, "c-member.c.ns.svc.cluster.local");
  t.match(requiredNames("c", "ns", ".cluster.local").member.why, /\*\.c\.ns\.svc\.cluster\.local/);
  t.equal(requiredNames("c", "ns").member.name, "c-member.c.ns.svc");
});

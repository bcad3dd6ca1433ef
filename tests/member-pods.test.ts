// Unit tests of the member pod builder: where each spec.pod field lands, and the choices the
// operator makes when the user gives none (spread members, emptyDir, the DNS wait).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t from "tap";
import type { EtcdCluster, NormalizedSpec } from "../shared/api/etcd-cluster.ts";
import { normalizedMaintenance } from "../shared/api/validate-etcd-cluster.ts";
import {
  clientService,
  DNS_WAIT_SCRIPT,
  memberClaim,
  memberHost,
  memberPod,
  peerService,
} from "../shared/member-pods.ts";

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
    maintenance: normalizedMaintenance(undefined),
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

t.test("pods and Services carry the labels and annotations coreos put on them", async (t) => {
  const pod = podFor({ labels: { team: "db" }, annotations: { note: "x" } });
  t.same(
    pod.metadata?.labels,
    { team: "db", app: "etcd", etcd_cluster: "c", etcd_node: "c-abc" },
    "app, etcd_cluster and etcd_node (the member's name), beside the user's",
  );
  t.same(pod.metadata?.annotations, { note: "x", "etcd.version": "3.6.16" });
  const peer = peerService(cluster);
  t.same(peer.metadata?.labels, { app: "etcd", etcd_cluster: "c" });
  t.same(peer.metadata?.annotations, { "service.alpha.kubernetes.io/tolerate-unready-endpoints": "true" });
  t.equal(
    peer.spec?.publishNotReadyAddresses,
    true,
    "what the annotation once asked for, as Kubernetes reads it now",
  );
  t.same(peer.spec?.selector, { app: "etcd", etcd_cluster: "c" }, "selectors never name one member");
  const client = clientService(cluster);
  t.same(client.metadata?.labels, { app: "etcd", etcd_cluster: "c" });
  t.notOk(client.metadata?.annotations, "no tolerate-unready annotation: clients reach Ready members only");
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
    maintenance: normalizedMaintenance(undefined),
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
    { name: "WAL_DIR", value: "/var/etcd/data/member/wal" },
    { name: "MESSAGE_FILE", value: "/dev/termination-log" },
  ]);
  const etcd = podFor({}).spec?.containers[0];
  t.ok(etcd?.command?.includes("--data-dir=/var/etcd/data"), "the WAL it looks for is etcd's own");
  t.same(
    init?.volumeMounts,
    [{ name: "etcd-data", mountPath: "/var/etcd", readOnly: true }],
    "it sees the member's data volume, read-only",
  );
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

/**
 * Runs the DNS wait with the host's shell (as the local kubelet does for busybox images), with
 * stand-ins for nslookup (misses `misses` times, then answers) and sleep (records, never sleeps).
 */
function runDnsWait(
  misses: number,
  options: { timeoutSeconds?: number; sleepTakesFractions?: boolean; withWal?: boolean } = {},
) {
  const dir = mkdtempSync(join(tmpdir(), "dns-wait-"));
  const log = join(dir, "log");
  writeFileSync(
    join(dir, "nslookup"),
    `#!/bin/sh\necho "lookup $1" >> "${log}"\nn=$(grep -c lookup "${log}")\n[ "$n" -gt ${misses} ]\n`,
    { mode: 0o755 },
  );
  const fractions = options.sleepTakesFractions ?? true;
  writeFileSync(
    join(dir, "sleep"),
    `#!/bin/sh\necho "sleep $1" >> "${log}"\n${fractions ? "" : 'case "$1" in *.*) exit 1;; esac\n'}`,
    { mode: 0o755 },
  );
  const result = spawnSync("/bin/sh", ["-c", DNS_WAIT_SCRIPT], {
    env: {
      PATH: `${dir}:/usr/bin:/bin`,
      MEMBER_HOST: "m.c.ns.svc",
      TIMEOUT_SECONDS: String(options.timeoutSeconds ?? 0),
      // The data volume as check-dns sees it: a member that ran before left its write-ahead log.
      WAL_DIR: options.withWal ? dir : join(dir, "member", "wal"),
      MESSAGE_FILE: join(dir, "message"),
    },
    encoding: "utf8",
    timeout: 30_000,
  });
  const lines = existsSync(log) ? readFileSync(log, "utf8").trim().split("\n") : [];
  const message = existsSync(join(dir, "message")) ? readFileSync(join(dir, "message"), "utf8") : "";
  rmSync(dir, { recursive: true, force: true });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr, lines, message };
}

t.test("the DNS wait looks again every 100 ms at first, then every second", async (t) => {
  const run = runDnsWait(33);
  t.equal(run.status, 0, run.stderr);
  t.equal(run.lines.filter((l) => l === "lookup m.c.ns.svc").length, 34, "33 misses, then the name");
  const sleeps = run.lines.filter((l) => l.startsWith("sleep "));
  t.same(sleeps, [...Array(30).fill("sleep 0.1"), ...Array(3).fill("sleep 1")]);
});

t.test("where sleep takes no fractions, the DNS wait sleeps whole seconds", async (t) => {
  const run = runDnsWait(2, { sleepTakesFractions: false });
  t.equal(run.status, 0, run.stderr);
  t.same(
    run.lines.filter((l) => l.startsWith("sleep ")),
    ["sleep 0.1", "sleep 1", "sleep 0.1", "sleep 1"],
  );
});

t.test("a member back on its volume, with its write-ahead log, does not wait for its name", async (t) => {
  const run = runDnsWait(5, { withWal: true });
  t.equal(run.status, 0, run.stderr);
  t.same(run.lines, [], "no lookup, no sleep");
  t.match(run.stdout, /no DNS wait: the member's write-ahead log is on its volume/, "it says why");
  t.equal(run.message, run.stdout, "in its termination message too");
  const fresh = runDnsWait(1);
  t.equal(fresh.lines.filter((l) => l.startsWith("lookup ")).length, 2, "an empty volume waits as before");
});

t.test("the DNS wait gives up after DNSTimeoutInSecond, and says so", async (t) => {
  // The stand-in sleep returns at once, so the wait spins on `date` until the deadline passes.
  const run = runDnsWait(1_000_000, { timeoutSeconds: 1 });
  t.equal(run.status, 1);
  t.match(run.stderr, /timed out waiting for DNS name m\.c\.ns\.svc/);
});

// End-to-end tests of the generated CRDs against a real kube-apiserver: coreos manifests apply unchanged
// and get their defaults, kubectl shows the printer columns and the descriptions, the scale and status
// subresources work, and the API server itself rejects bad specs with readable messages.
import { spawnSync } from "node:child_process";
import { KubeConfig } from "@kubernetes/client-node";
import tap from "tap";
import { installCrds } from "../infra/crds.ts";
import { ensureAssets } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { waitFor } from "../infra/local/kube-wait.ts";

const assets = await ensureAssets();
const cluster = await startLocalCluster({ name: "e2e-crds", redis: false, kubelet: false });
tap.teardown(() => cluster.stop());
const kc = new KubeConfig();
kc.loadFromFile(cluster.kubeconfigPath);

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], input?: string): Run {
  const result = spawnSync(assets.kubectl, ["--kubeconfig", cluster.kubeconfigPath, ...args], {
    encoding: "utf8",
    input,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** kubectl that must succeed; returns stdout. */
function kubectl(args: string[], input?: string): string {
  const result = run(args, input);
  if (result.status !== 0) throw new Error(`kubectl ${args.join(" ")} failed: ${result.stderr}`);
  return result.stdout;
}

function getJson(resource: string): Record<string, unknown> & { spec: Record<string, unknown> } {
  return JSON.parse(kubectl(["get", resource, "-o", "json"]));
}

/** The column names of `kubectl get` output. */
function header(output: string): string[] {
  return (output.split("\n")[0] ?? "").trim().split(/\s{2,}/);
}

function clusterManifest(name: string, spec: Record<string, unknown>): string {
  return JSON.stringify({
    apiVersion: "etcd.database.coreos.com/v1beta2",
    kind: "EtcdCluster",
    metadata: { name },
    spec,
  });
}

await tap.test(
  "installCrds creates the three CRDs, waits until they are served, and can run again",
  async (t) => {
    await installCrds(kc);
    await installCrds(kc);
    const names = kubectl(["get", "crd", "-o", "name"]).trim().split("\n").sort();
    t.same(names, [
      "customresourcedefinition.apiextensions.k8s.io/etcdbackups.etcd.database.coreos.com",
      "customresourcedefinition.apiextensions.k8s.io/etcdclusters.etcd.database.coreos.com",
      "customresourcedefinition.apiextensions.k8s.io/etcdrestores.etcd.database.coreos.com",
    ]);
    const crd = JSON.parse(kubectl(["get", "crd", "etcdclusters.etcd.database.coreos.com", "-o", "json"]));
    const conditions: { type: string; status: string }[] = crd.status.conditions;
    t.ok(
      conditions.some((c) => c.type === "Established" && c.status === "True"),
      "Established",
    );
    t.notOk(
      conditions.some((c) => c.type === "NonStructuralSchema"),
      "the schema is structural (no NonStructuralSchema condition)",
    );
    t.same(crd.spec.names.shortNames, ["etcd"]);
  },
);

await tap.test("the seeds' example cluster applies unchanged and gets its defaults", async (t) => {
  const out = kubectl(["apply", "-f", "manifests/examples/example-etcd-cluster.yaml"]);
  t.match(out, /etcdcluster.etcd.database.coreos.com\/example-etcd-cluster created/);
  const etcd = getJson("etcd/example-etcd-cluster");
  t.same(etcd.spec, { size: 3, version: "3.7.3", repository: "quay.io/coreos/etcd" });
});

await tap.test(
  "a coreos manifest using every pod policy field applies and keeps its embedded objects",
  async (t) => {
    const spec = {
      size: 3,
      version: "v3.5.35",
      repository: "registry.example.com:5000/mirror/etcd",
      paused: false,
      pod: {
        labels: { tier: "storage" },
        nodeSelector: { "kubernetes.io/os": "linux" },
        affinity: {
          podAntiAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: [
              {
                topologyKey: "kubernetes.io/hostname",
                labelSelector: { matchLabels: { etcd_cluster: "full" } },
              },
            ],
          },
        },
        antiAffinity: true,
        resources: { limits: { cpu: "300m", memory: "200Mi" }, requests: { cpu: "200m" } },
        tolerations: [{ key: "dedicated", operator: "Equal", value: "etcd", effect: "NoSchedule" }],
        etcdEnv: [
          { name: "ETCD_AUTO_COMPACTION_RETENTION", value: "1" },
          {
            name: "ETCD_QUOTA_BACKEND_BYTES",
            valueFrom: { configMapKeyRef: { name: "etcd-tuning", key: "quota" } },
          },
        ],
        persistentVolumeClaimSpec: {
          accessModes: ["ReadWriteOnce"],
          resources: { requests: { storage: "1Gi" } },
        },
        annotations: { "prometheus.io/scrape": "true" },
        busyboxImage: "busybox:1.36",
        securityContext: { runAsNonRoot: true, runAsUser: 9000, fsGroup: 9000 },
        DNSTimeoutInSecond: 60,
        ClusterDomain: ".cluster.local",
      },
      TLS: {
        static: {
          member: { peerSecret: "etcd-peer-tls", serverSecret: "etcd-server-tls" },
          operatorSecret: "etcd-client-tls",
        },
      },
    };
    // kubectl validates strictly: an unknown field anywhere would fail the apply.
    kubectl(["apply", "-f", "-"], clusterManifest("full", spec));
    t.same(getJson("etcd/full").spec, spec, "nothing pruned, nothing added");
  },
);

await tap.test("kubectl get etcd prints SIZE READY VERSION PHASE AGE", async (t) => {
  const out = kubectl(["get", "etcd", "example-etcd-cluster"]);
  t.same(header(out), ["NAME", "SIZE", "READY", "VERSION", "PHASE", "AGE"]);
  t.match(out, /example-etcd-cluster\s+3\s/);
});

await tap.test("kubectl explain etcdcluster.spec.pod shows the descriptions", async (t) => {
  // The API server publishes a new CRD's OpenAPI a moment after it is Established.
  const out = await waitFor("kubectl explain etcdcluster.spec.pod", async () => {
    const result = run(["explain", "etcdcluster.spec.pod"]);
    return result.status === 0 ? result.stdout : undefined;
  });
  t.match(out, /How the operator builds the etcd pods/);
  t.match(out, /etcdEnv\s+<\[\]Object>\s+Environment variables for the etcd container/);
  t.match(out, /persistentVolumeClaimSpec\s+<Object>/);
  const size = kubectl(["explain", "etcd.spec.size"]);
  t.match(size, /The number of etcd members, from 1 to 9/);
});

await tap.test("kubectl scale changes spec.size through the scale subresource", async (t) => {
  t.match(kubectl(["scale", "etcd/example-etcd-cluster", "--replicas=5"]), /scaled/);
  t.equal(getJson("etcd/example-etcd-cluster").spec.size, 5);
  const scale = JSON.parse(
    kubectl(["get", "etcd/example-etcd-cluster", "--subresource=scale", "-o", "json"]),
  );
  t.equal(scale.kind, "Scale");
  t.equal(scale.spec.replicas, 5);
  const tooMany = run(["scale", "etcd/example-etcd-cluster", "--replicas=10"]);
  t.not(tooMany.status, 0, "scaling past the cap is refused");
  t.match(tooMany.stderr, /spec\.size.*less than or equal to 9/);
  t.equal(getJson("etcd/example-etcd-cluster").spec.size, 5);
});

await tap.test(
  "status is a subresource: written through /status, ignored on the main resource",
  async (t) => {
    const status = {
      phase: "Running",
      size: 5,
      readyMembers: 5,
      currentVersion: "3.7.3",
      selector: "app=etcd,etcd_cluster=example-etcd-cluster",
      members: { ready: ["example-etcd-cluster-a"], unready: [] },
      conditions: [{ type: "Available", status: "True", reason: "QuorumHealthy", observedGeneration: 2 }],
    };
    kubectl([
      "patch",
      "etcd/example-etcd-cluster",
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({ status }),
    ]);
    t.match(getJson("etcd/example-etcd-cluster").status, status);
    const out = kubectl(["get", "etcd", "example-etcd-cluster"]);
    t.match(out, /example-etcd-cluster\s+5\s+5\s+3\.7\.3\s+Running\s/);
    kubectl(["patch", "etcd/example-etcd-cluster", "--type=merge", "-p", '{"status":{"phase":"Failed"}}']);
    t.match(
      getJson("etcd/example-etcd-cluster").status,
      { phase: "Running" },
      "a main-resource patch leaves status",
    );
    const badPhase = run([
      "patch",
      "etcd/example-etcd-cluster",
      "--subresource=status",
      "--type=merge",
      "-p",
      '{"status":{"phase":"Exploded"}}',
    ]);
    t.not(badPhase.status, 0);
    t.match(badPhase.stderr, /status\.phase: Unsupported value: "Exploded"/);
  },
);

/** Applies an EtcdCluster with `spec`, expects the API server to refuse it, returns the error text. */
function rejected(t: Pick<typeof tap, "not" | "equal">, name: string, spec: Record<string, unknown>): string {
  const result = run(["apply", "-f", "-"], clusterManifest(name, spec));
  t.not(result.status, 0, `${JSON.stringify(spec)} is refused`);
  t.equal(run(["get", "etcd", name]).status, 1, "and not stored");
  return result.stderr;
}

await tap.test("the API server rejects bad specs with clear messages", async (t) => {
  t.match(
    rejected(t, "size-zero", { size: 0 }),
    /spec\.size: Invalid value: 0: spec\.size in body should be greater than or equal to 1/,
  );
  t.match(rejected(t, "size-negative", { size: -1 }), /spec\.size.*greater than or equal to 1/);
  t.match(rejected(t, "size-big", { size: 100 }), /spec\.size.*less than or equal to 9/);
  t.match(rejected(t, "size-fraction", { size: 3.5 }), /spec\.size.*must be of type integer/);
  t.match(rejected(t, "no-size", { version: "3.7.3" }), /spec\.size: Required value/);
  t.match(
    rejected(t, "version-latest", { size: 3, version: "latest" }),
    /spec\.version.*version must be an etcd release like "3\.\d+\.\d+" \(a leading "v" is allowed\)/,
  );
  t.match(
    rejected(t, "repo-tag", { size: 3, repository: "quay.io/coreos/etcd:v3.5.0" }),
    /spec\.repository.*repository must be an image repository without a tag/,
  );
  t.match(
    rejected(t, "repo-shell", { size: 3, repository: "quay.io/coreos/etcd;rm -rf /" }),
    /spec\.repository.*repository must be an image repository without a tag/,
  );
  t.match(
    rejected(t, "reserved-label", { size: 3, pod: { labels: { app: "mine" } } }),
    /spec\.pod\.labels.*the labels "app" and "etcd_\*" are reserved/,
  );
  t.match(
    rejected(t, "reserved-annotation", { size: 3, pod: { annotations: { "etcd.version": "3.5.0" } } }),
    /spec\.pod\.annotations.*"etcd\.version" is reserved/,
  );
  t.match(
    rejected(t, "owned-env", {
      size: 3,
      pod: { etcdEnv: [{ name: "ETCD_INITIAL_CLUSTER_STATE", value: "new" }] },
    }),
    /spec\.pod\.etcdEnv\[0\].*ETCD_INITIAL_CLUSTER_STATE is set by the operator itself/,
  );
  t.match(
    rejected(t, "tls-half", { size: 3, TLS: { static: { member: { serverSecret: "etcd-server-tls" } } } }),
    /spec\.TLS\.static.*operatorSecret and member\.serverSecret go together/,
  );
});

await tap.test("the backup and restore examples apply, with columns and status subresources", async (t) => {
  for (const file of [
    "example-etcd-backup-s3.yaml",
    "example-etcd-backup-oss.yaml",
    "example-etcd-restore.yaml",
  ]) {
    t.match(kubectl(["apply", "-f", `manifests/examples/${file}`]), /created/, file);
  }
  const backup = getJson("etcdbackup/example-etcd-cluster-backup");
  t.match(backup.spec, {
    storageType: "S3",
    s3: { path: "etcd-backups/example-etcd-cluster.backup", awsSecret: "aws" },
  });
  t.match(getJson("etcdbackup/example-etcd-cluster-periodic-backup").spec, {
    storageType: "OSS",
    backupPolicy: { backupIntervalInSecond: 125, maxBackups: 4 },
  });

  kubectl([
    "patch",
    "etcdbackup/example-etcd-cluster-backup",
    "--subresource=status",
    "--type=merge",
    "-p",
    JSON.stringify({
      status: {
        succeeded: true,
        etcdVersion: "3.7.3",
        etcdRevision: 42,
        lastSuccessDate: new Date().toISOString(),
      },
    }),
  ]);
  const backups = kubectl(["get", "etcdbackup", "example-etcd-cluster-backup"]);
  t.same(header(backups), ["NAME", "STORAGE", "SUCCEEDED", "LAST SUCCESS", "AGE"]);
  t.match(backups, /example-etcd-cluster-backup\s+S3\s+true\s+\d+s/);

  kubectl([
    "patch",
    "etcdrestore/example-etcd-cluster",
    "--subresource=status",
    "--type=merge",
    "-p",
    '{"status":{"phase":"Failed","succeeded":false,"reason":"backup not found"}}',
  ]);
  const restores = kubectl(["get", "etcdrestore"]);
  t.same(header(restores), ["NAME", "CLUSTER", "PHASE", "SUCCEEDED", "AGE"]);
  t.match(restores, /example-etcd-cluster\s+example-etcd-cluster\s+Failed\s+false\s/);
});

await tap.test(
  "the API server rejects backups and restores that name no storage or the wrong cluster",
  async (t) => {
    const backup = JSON.stringify({
      apiVersion: "etcd.database.coreos.com/v1beta2",
      kind: "EtcdBackup",
      metadata: { name: "no-s3" },
      spec: { storageType: "S3", oss: { path: "b/etcd.backup", ossSecret: "oss" } },
    });
    const noSection = run(["apply", "-f", "-"], backup);
    t.not(noSection.status, 0);
    t.match(noSection.stderr, /storageType needs the section of the same name: s3 for S3/);

    const badType = run(["apply", "-f", "-"], backup.replace('"storageType":"S3"', '"storageType":"FTP"'));
    t.not(badType.status, 0);
    t.match(badType.stderr, /spec\.storageType: Unsupported value: "FTP"/);

    const restore = run(
      ["apply", "-f", "-"],
      JSON.stringify({
        apiVersion: "etcd.database.coreos.com/v1beta2",
        kind: "EtcdRestore",
        metadata: { name: "other-name" },
        spec: {
          etcdCluster: { name: "example-etcd-cluster" },
          backupStorageType: "S3",
          s3: { path: "b/etcd.backup", awsSecret: "aws" },
        },
      }),
    );
    t.not(restore.status, 0);
    t.match(restore.stderr, /metadata\.name must be the same as spec\.etcdCluster\.name/);
  },
);

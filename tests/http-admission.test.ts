// The admission reviews' rules, without a cluster: what the webhook refuses (and why, in words a
// person can act on) and what it lets through. The end-to-end test (http-e2e) shows the API server
// and kubectl carrying these answers.
import t from "tap";
import {
  reviewEtcdBackup,
  reviewEtcdRestore,
  storageProblems,
} from "../infra/http/admission/backup-storage.ts";
import {
  reviewEtcdCluster,
  reviewEtcdClusterScale,
  scaleDownProblem,
  versionChangeProblem,
} from "../infra/http/admission/etcd-cluster.ts";

function cluster(spec: Record<string, unknown>, status?: Record<string, unknown>) {
  return {
    apiVersion: "etcd.database.coreos.com/v1beta2",
    kind: "EtcdCluster",
    metadata: { name: "c", namespace: "default" },
    spec,
    ...(status ? { status } : {}),
  };
}

function update(before: object, after: object, runningVersions?: string[]) {
  return reviewEtcdCluster({ operation: "UPDATE", oldObject: before, object: after, runningVersions });
}

t.test("a valid new cluster is allowed, with the validator's warnings passed on", async (t) => {
  const ok = reviewEtcdCluster({ operation: "CREATE", object: cluster({ size: 3, version: "3.6.16" }) });
  t.same(ok, { allowed: true, warnings: [] });
  const even = reviewEtcdCluster({ operation: "CREATE", object: cluster({ size: 4 }) });
  t.equal(even.allowed, true);
  t.match(even.warnings.join(), /spec.size 4 is even/);
});

t.test("a spec the reconcile would refuse is refused at admission with the same message", async (t) => {
  const old = reviewEtcdCluster({ operation: "CREATE", object: cluster({ size: 3, version: "3.3.0" }) });
  t.equal(old.allowed, false);
  t.match(old.message, /spec.version "3.3.0" is not supported: etcd older than 3.4/);
  const owned = reviewEtcdCluster({
    operation: "CREATE",
    object: cluster({ size: 1, pod: { etcdEnv: [{ name: "ETCD_NAME", value: "x" }] } }),
  });
  t.match(owned.message, /sets ETCD_NAME, which the operator sets itself/);
  const missing = reviewEtcdCluster({ operation: "CREATE", object: { metadata: { name: "c" } } });
  t.match(missing.message, /spec must be an object/);
});

t.test(
  "a new cluster's name must make DNS-label member pod names; an existing one is not refused for it",
  async (t) => {
    const named = (name: string) => ({ ...cluster({ size: 3 }), metadata: { name, namespace: "default" } });
    t.equal(
      reviewEtcdCluster({ operation: "CREATE", object: named("a".repeat(52)) }).allowed,
      true,
      "52 characters",
    );
    for (const name of ["a".repeat(53), "1abc", "a.b", "a_b"]) {
      const refused = reviewEtcdCluster({ operation: "CREATE", object: named(name) });
      t.equal(refused.allowed, false, `${name.length > 20 ? `${name.length} characters` : name} refused`);
      t.match(
        refused.message,
        /metadata.name must be at most 52 characters of a-z, 0-9 and "-", starting with a letter/,
      );
    }
    const long = named("a".repeat(60));
    t.equal(
      update(long, { ...long, spec: { size: 3, paused: true } }).allowed,
      true,
      "an update of an old one passes",
    );
  },
);

t.test("a scale-down removes at most half of the members in one change", async (t) => {
  t.equal(scaleDownProblem(5, 3), undefined, "5 → 3");
  t.equal(scaleDownProblem(3, 2), undefined, "3 → 2");
  t.equal(scaleDownProblem(2, 1), undefined, "2 → 1: a two-member cluster can still shrink");
  t.equal(scaleDownProblem(3, 5), undefined, "scale-up is not limited here");
  t.match(
    scaleDownProblem(5, 2),
    /spec.size 2 would remove 3 of the cluster's 5 members.*set spec.size to 3 first/,
  );
  t.match(scaleDownProblem(3, 1), /set spec.size to 2 first/);

  const five = cluster({ size: 5 }, { size: 5 });
  t.equal(update(five, cluster({ size: 3 })).allowed, true);
  const refused = update(five, cluster({ size: 1 }));
  t.equal(refused.allowed, false);
  t.match(refused.message, /would remove 4 of the cluster's 5 members in one change/);
  // Mid-scale the members present count, not the spec: 5 asked, 3 there, 1 asked now → more than half of 3.
  t.equal(update(cluster({ size: 5 }, { size: 3 }), cluster({ size: 1 })).allowed, false);
  // Without status (never reconciled), the old spec is what there is.
  t.equal(update(cluster({ size: 5 }), cluster({ size: 2 })).allowed, false);
});

t.test("kubectl scale (the scale subresource) follows the same rule", async (t) => {
  const scale = (spec: number, status?: number) => ({
    apiVersion: "autoscaling/v1",
    kind: "Scale",
    spec: { replicas: spec },
    ...(status !== undefined ? { status: { replicas: status } } : {}),
  });
  t.equal(reviewEtcdClusterScale(scale(5, 5), scale(3)).allowed, true);
  const refused = reviewEtcdClusterScale(scale(5, 5), scale(1));
  t.equal(refused.allowed, false);
  t.match(refused.message, /^replicas 1 would remove 4 of the cluster's 5 members/);
});

t.test("version changes: no downgrade, no minor step the operator does not take in place", async (t) => {
  t.equal(versionChangeProblem(["3.5.35"], "3.6.16"), undefined, "one minor up");
  t.equal(versionChangeProblem(["3.6.1"], "3.6.16"), undefined, "a patch up");
  t.match(
    versionChangeProblem(["3.7.3"], "3.6.16"),
    /spec.version 3.6.16 is older than etcd 3.7.3, which the cluster runs: downgrades are not done automatically/,
  );
  t.equal(versionChangeProblem(["3.6.16"], "3.7.3"), undefined, "3.6 → 3.7 (the old log is drained first)");
  t.equal(versionChangeProblem(["3.7.3"], "3.6.16", true), undefined, "an allowed downgrade by one minor");
  t.match(versionChangeProblem(["3.7.3"], "3.5.35", true), /one minor version at a time/);
  t.match(
    versionChangeProblem(["3.7.3"], "3.6.16"),
    /allow-downgrade="true"/,
    "the refusal says how to allow it",
  );
  t.equal(versionChangeProblem(["3.5.35"], "3.7.3"), undefined, "a minor skip is done one minor at a time");
  // Mid-upgrade some members already run 3.6: going back to 3.5 would leave them there.
  t.match(
    versionChangeProblem(["3.5.35", "3.6.16"], "3.5.35"),
    /older than etcd 3.6.16, which members of the cluster run/,
  );

  const running = cluster({ size: 3, version: "3.7.3" }, { currentVersion: "3.7.3" });
  const downgrade = update(running, cluster({ size: 3, version: "3.6.16" }));
  t.equal(downgrade.allowed, false);
  t.match(downgrade.message, /downgrades are not done automatically/);
  t.equal(
    update(running, cluster({ size: 3, version: "v3.7.3" })).allowed,
    true,
    '"v" prefix is the same version',
  );
  // The member pods' versions, when the webhook found them, win over status.currentVersion (the oldest).
  const mixed = update(
    cluster({ size: 3, version: "3.6.16" }, { currentVersion: "3.5.35" }),
    cluster({ size: 3, version: "3.5.35" }),
    ["3.5.35", "3.6.16", "3.6.16"],
  );
  t.equal(mixed.allowed, false);
});

t.test(
  "an unchanged version is not checked again, so other edits of a refused cluster go through",
  async (t) => {
    // The spec asks for 3.7.3 but members run 3.6 (the planner refused the upgrade): scaling must still work.
    const refusedUpgrade = cluster({ size: 3, version: "3.7.3" }, { size: 3, currentVersion: "3.6.16" });
    t.equal(update(refusedUpgrade, cluster({ size: 5, version: "3.7.3" })).allowed, true);
    // And setting the version back to what runs is allowed.
    t.equal(update(refusedUpgrade, cluster({ size: 3, version: "3.6.16" })).allowed, true);
  },
);

t.test("TLS and the cluster domain cannot change once the cluster exists", async (t) => {
  const tls = { static: { member: { peerSecret: "peer" } } };
  const before = cluster({ size: 3, TLS: tls, pod: { ClusterDomain: ".cluster.local" } });
  t.equal(
    update(before, cluster({ size: 3, TLS: tls, pod: { ClusterDomain: "cluster.local" } })).allowed,
    true,
  );
  const noTls = update(before, cluster({ size: 3, pod: { ClusterDomain: ".cluster.local" } }));
  t.equal(noTls.allowed, false);
  t.match(noTls.message, /spec.TLS cannot change once the cluster exists/);
  const domain = update(before, cluster({ size: 3, TLS: tls, pod: { ClusterDomain: "example.org" } }));
  t.match(
    domain.message,
    /spec.pod.ClusterDomain cannot change once the cluster exists \("cluster.local" → "example.org"\)/,
  );
  const both = update(before, cluster({ size: 1, pod: {} }), ["3.7.3"]);
  t.match(
    both.message,
    /would remove 2 of the cluster's 3 members.*spec.TLS cannot change.*spec.pod.ClusterDomain cannot change/,
    "every problem is reported at once (scale, TLS, domain)",
  );
});

function backup(spec: Record<string, unknown>) {
  return {
    apiVersion: "etcd.database.coreos.com/v1beta2",
    kind: "EtcdBackup",
    metadata: { name: "b" },
    spec,
  };
}
const s3 = { storageType: "S3", s3: { path: "mybucket/etcd.backup", awsSecret: "aws" } };

t.test("backups: the four coreos storages, each with a usable path and secret", async (t) => {
  t.same(reviewEtcdBackup({ operation: "CREATE", object: backup(s3) }), { allowed: true, warnings: [] });
  t.equal(
    reviewEtcdBackup({
      operation: "CREATE",
      object: backup({ storageType: "OSS", oss: { path: "b-1/x", ossSecret: "o" } }),
    }).allowed,
    true,
  );
  t.same(
    reviewEtcdBackup({
      operation: "CREATE",
      object: backup({ storageType: "ABS", abs: { path: "backups/x", absSecret: "a" } }),
    }),
    { allowed: true, warnings: [] },
    "ABS",
  );
  t.match(
    storageProblems({ storageType: "ABS", abs: { path: "my.container/x", absSecret: "a" } }, "storageType"),
    [/spec.abs.path "my.container\/x" starts with an invalid container name "my.container": container names/],
    "an Azure container name has no dots",
  );
  t.match(
    storageProblems({ storageType: "ABS", abs: { path: "ctr/x" } }, "storageType"),
    [/spec.abs.absSecret undefined must name a Secret/],
    "ABS needs its Secret",
  );
  t.same(
    storageProblems({ storageType: "GCS", gcs: { path: "my_bucket/x" } }, "storageType"),
    [],
    "GCS without a Secret (the operator's own credentials), and a bucket with an underscore",
  );
  t.match(
    storageProblems(
      { storageType: "GCS", gcs: { path: "b-1/x", gcpSecret: "g", endpoint: "ftp://x" } },
      "storageType",
    ),
    [/spec.gcs.endpoint "ftp:\/\/x" is not an http:\/\/ or https:\/\/ URL/],
  );
  t.match(storageProblems({ storageType: "FTP" }, "storageType"), [
    /"FTP" is not a storage type: use one of S3, ABS, GCS, OSS/,
  ]);
  t.match(storageProblems({}, "storageType"), [/spec.storageType is required/]);
  t.match(storageProblems({ storageType: "S3" }, "storageType"), [/needs the section spec.s3/]);
  t.match(storageProblems({ storageType: "S3", s3: { path: "nobucket", awsSecret: "a" } }, "storageType"), [
    /spec.s3.path "nobucket" must be "<bucket>\/<path-to-backup>"/,
  ]);
  t.match(
    storageProblems({ storageType: "S3", s3: { path: "Bad_Bucket/x", awsSecret: "a" } }, "storageType"),
    [/invalid bucket name "Bad_Bucket"/],
  );
  t.match(
    storageProblems(
      { storageType: "S3", s3: { path: "bucket/x", awsSecret: "Not A Secret" } },
      "storageType",
    ),
    [/spec.s3.awsSecret "Not A Secret" must name a Secret/],
  );
  t.match(
    storageProblems(
      { storageType: "S3", s3: { path: "bucket/x", awsSecret: "a", endpoint: "minio:9000" } },
      "storageType",
    ),
    [/spec.s3.endpoint "minio:9000" is not an http:\/\/ or https:\/\/ URL/],
  );
  const endpoints = reviewEtcdBackup({
    operation: "CREATE",
    object: backup({ ...s3, etcdEndpoints: ["http://x:2379", "x:2379"] }),
  });
  t.match(endpoints.message, /spec.etcdEndpoints\[1\] "x:2379" is not an http/);
  const policy = reviewEtcdBackup({
    operation: "CREATE",
    object: backup({ ...s3, backupPolicy: { maxBackups: 3 } }),
  });
  t.equal(policy.allowed, true);
  t.match(policy.warnings.join(), /maxBackups only applies to periodic backups/);
  const moved = reviewEtcdBackup({
    operation: "UPDATE",
    oldObject: backup(s3),
    object: backup({ storageType: "OSS", oss: { path: "b-1/x", ossSecret: "o" } }),
  });
  t.match(moved.message, /spec.storageType cannot change \("S3" → "OSS"\)/);
});

t.test("restores: implemented storage, a cluster to restore, and a spec that never changes", async (t) => {
  const restore = (spec: Record<string, unknown>, labels: Record<string, string> = {}) => ({
    metadata: { name: "c", labels },
    spec,
  });
  const spec = {
    etcdCluster: { name: "c" },
    backupStorageType: "S3",
    s3: { path: "bucket/x", awsSecret: "a" },
  };
  t.equal(reviewEtcdRestore({ operation: "CREATE", object: restore(spec) }).allowed, true);
  t.match(
    reviewEtcdRestore({ operation: "CREATE", object: restore({ ...spec, etcdCluster: {} }) }).message,
    /spec.etcdCluster.name is required/,
  );
  t.match(
    reviewEtcdRestore({
      operation: "CREATE",
      object: restore({ ...spec, backupStorageType: "GCS", gcs: { path: "b/x" } }),
    }).message,
    /invalid bucket name "b"/,
  );
  t.equal(
    reviewEtcdRestore({
      operation: "CREATE",
      object: restore({ ...spec, backupStorageType: "GCS", gcs: { path: "bucket/x" } }),
    }).allowed,
    true,
    "a GCS restore with the operator's own credentials",
  );
  t.equal(
    reviewEtcdRestore({ operation: "UPDATE", oldObject: restore(spec), object: restore(spec, { team: "a" }) })
      .allowed,
    true,
    "metadata-only changes are fine",
  );
  const changed = reviewEtcdRestore({
    operation: "UPDATE",
    oldObject: restore(spec),
    object: restore({ ...spec, s3: { path: "bucket/other", awsSecret: "a" } }),
  });
  t.match(changed.message, /the spec of an EtcdRestore cannot change once it is created/);
});

// The operator as its image runs it (infra/bundle.ts: the sources and @kubernetes/client-node in one
// bundle, other packages from node_modules): the other tests run the TypeScript sources, so this one
// builds the bundle and runs its watcher and worker as separate processes against the local control
// plane, through a 3-member cluster's whole life: create, a member pod lost and replaced, delete.
// A bundle that dropped a class still in use, or a package that cannot live in one, fails here.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CustomObjectsApi } from "@kubernetes/client-node";
import t from "tap";
import { buildOperatorBundle } from "../infra/bundle.ts";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import { Kube } from "../shared/kube.ts";
import { type ClusterClients, createCluster, etcdClient, getCluster, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { ROOT } from "./helpers/packaging.ts";

// Inside the project, so that the bundle's imports of the other packages resolve to node_modules as
// they do from the image's dist/; apart from dist/, so a benchmark's bundle is left alone.
const outdir = join(ROOT, "node_modules", ".cache", "etcd-operator-bundle-test");
const bundle = await buildOperatorBundle(outdir);

t.test("the bundle holds the entry and the chunks of the roles it imports on demand", async (t) => {
  t.equal(bundle.entry, join(outdir, "operator.js"));
  t.ok(bundle.files > 1, `${bundle.files} files: operator.js and a chunk per lazily imported role`);
  const entry = readFileSync(bundle.entry, "utf8");
  t.notMatch(entry, /from\s*"@kubernetes\/client-node"/, "client-node is inside the bundle, not imported");
  t.match(entry, /from\s*"bullmq"|import\("bullmq"\)|from\s*"ioredis"/, "other packages stay imports");
  // Built here by infra/native/build.ts (npm test installs a C compiler), loaded from dist/native/.
  t.same(
    bundle.mallocTrim,
    { path: join(outdir, "native", "malloc-trim.node") },
    "with the malloc_trim addon",
  );
});

const cluster = await startLocalCluster({ name: "e2e-bundle" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
const processes: OperatorProcess[] = [
  startOperatorProcess(cluster, "watcher", {}, bundle.entry),
  startOperatorProcess(cluster, "worker", {}, bundle.entry),
];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

t.test("the bundled watcher and worker run a 3-member cluster from create to delete", async (t) => {
  await createCluster(c, "default", "bundled", { size: 3 });
  await waitReady(c, "default", "bundled", 3);
  const available = (await getCluster(c, "default", "bundled")).status?.conditions?.find(
    (x) => x.type === "Available",
  );
  t.equal(available?.status, "True", "Available");

  const etcd = await etcdClient(c, "default", "bundled");
  t.teardown(() => etcd.close());
  await etcd.put("written").value("before the loss");

  const pods = await core.listNamespacedPod({ namespace: "default", labelSelector: "etcd_cluster=bundled" });
  const victim = pods.items[0]?.metadata?.name ?? "";
  await core.deleteNamespacedPod({ namespace: "default", name: victim, gracePeriodSeconds: 0 });
  await waitFor(`${victim} to be replaced`, async () => {
    const now = await core.listNamespacedPod({ namespace: "default", labelSelector: "etcd_cluster=bundled" });
    const names = now.items.filter((p) => !p.metadata?.deletionTimestamp).map((p) => p.metadata?.name);
    return names.length === 3 && !names.includes(victim) ? true : undefined;
  });
  await waitReady(c, "default", "bundled", 3);
  const members = await etcd.cluster.memberList({});
  t.equal(members.members.filter((m) => !m.isLearner).length, 3, "three voting members again");
  t.equal(await etcd.get("written").string(), "before the loss", "the data survived");

  await c.custom.deleteNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace: "default",
    plural: PLURAL,
    name: "bundled",
  });
  await waitFor("the member pods to go with the cluster", async () => {
    const left = await core.listNamespacedPod({
      namespace: "default",
      labelSelector: "etcd_cluster=bundled",
    });
    return left.items.length === 0 ? true : undefined;
  });

  for (const p of processes) {
    const log = readFileSync(p.logFile, "utf8");
    t.match(log, /"msg":"etcd operator running"/, `the bundled ${p.role} started`);
    t.equal(p.child.exitCode, null, `the bundled ${p.role} still runs`);
    // What a broken bundle logs: a class or module it lost, or code it mangled.
    t.notMatch(
      log,
      /ReferenceError|is not a constructor|is not a function|Cannot find (module|package)|ERR_MODULE_NOT_FOUND/,
      `the bundled ${p.role} logged no error of a broken bundle`,
    );
    t.notMatch(log, /no malloc_trim/, `the bundled ${p.role} found the malloc_trim addon beside its chunks`);
  }
});

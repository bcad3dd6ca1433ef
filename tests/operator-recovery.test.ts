// End-to-end: quorum loss. Two of three members are deleted with their pods (and so their data
// dirs): the cluster is rebuilt from the survivor and grows back to three members with every
// acknowledged write present, and the Events say what happened.
import { CustomObjectsApi } from "@kubernetes/client-node";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { RECOVERY_ANNOTATION } from "../shared/api/etcd-cluster.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import { eventsOf } from "./helpers/backups.ts";
import { type ClusterClients, createCluster, etcdClient, getCluster, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const cluster = await startLocalCluster({ name: "e2e-recovery" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const c: ClusterClients = { kube: new Kube(kc), core, custom: kc.makeApiClient(CustomObjectsApi) };
await installCrds(kc);
const processes: OperatorProcess[] = [
  startOperatorProcess(cluster, "all", { OPERATOR_IMAGE: "localhost/etcd-operator:dev" }),
];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

t.test(
  "two of three members lost with their data: rebuilt from the survivor, nothing acknowledged lost",
  async (t) => {
    await createCluster(c, NS, "phoenix", { size: 3, version: newestPatchOf("3.6") });
    await waitReady(c, NS, "phoenix", 3);
    const client = await etcdClient(c, NS, "phoenix");
    const acknowledged: string[] = [];
    for (let i = 0; i < 500; i++) {
      const key = `ack-${String(i).padStart(4, "0")}`;
      await client.put(key).value(`value-${i}`);
      acknowledged.push(key);
    }
    client.close();
    const pods = (await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=phoenix" }))
      .items;
    const victims = pods.slice(0, 2).map((p) => p.metadata?.name ?? "");
    const survivor = pods[2]?.metadata?.name ?? "";
    for (const name of victims)
      await core.deleteNamespacedPod({ namespace: NS, name, gracePeriodSeconds: 0 });

    await waitFor(
      "a QuorumRecovered event",
      async () =>
        (await eventsOf(c, NS, "EtcdCluster", "phoenix")).some((e) => e.reason === "QuorumRecovered")
          ? true
          : undefined,
      {
        timeoutMs: 120_000,
        intervalMs: 500,
        describe: async () => JSON.stringify((await getCluster(c, NS, "phoenix")).status?.conditions),
      },
    );
    await waitReady(c, NS, "phoenix", 3, 120_000);
    const events = await eventsOf(c, NS, "EtcdCluster", "phoenix");
    const started = events.find((e) => e.reason === "QuorumRecoveryStarted");
    t.match(started?.message, new RegExp(`from member ${survivor}`), "the recovery names the survivor");
    t.match(started?.message, /writes it had not applied are lost/, "and says what may be lost");
    t.match(
      events.find((e) => e.reason === "QuorumRecovered")?.message,
      /rebuilt from member .* at revision \d+/,
    );
    const after = await etcdClient(c, NS, "phoenix");
    const values = await after.getAll().prefix("ack-").strings();
    after.close();
    t.equal(Object.keys(values).length, acknowledged.length, "every acknowledged write is there");
    t.same(
      acknowledged.filter((k, i) => values[k] !== `value-${i}`),
      [],
      "with its value",
    );
    const final = await getCluster(c, NS, "phoenix");
    t.notOk(final.metadata?.annotations?.[RECOVERY_ANNOTATION], "the recovery mark is lifted");
    t.equal(
      final.status?.conditions?.find((x) => x.type === "Degraded")?.status,
      "False",
      "no longer degraded",
    );
    const names = (
      await core.listNamespacedPod({ namespace: NS, labelSelector: "etcd_cluster=phoenix" })
    ).items.map((p) => p.metadata?.name);
    t.notOk(names.includes(survivor), "the survivor was replaced by the rebuilt cluster's members");
  },
);

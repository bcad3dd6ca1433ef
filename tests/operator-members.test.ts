// End-to-end: what a member pod is made of. Every pod policy field shows up in the pods (checked
// field by field) and the extra etcd flags reach etcd itself; a flag the operator owns is refused
// with a clear message and the running cluster is left alone; members on persistent volumes come
// back from a lost pod with the same member ID and their data, and volumes go with their members.
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { CustomObjectsApi, SchedulingV1Api, type V1Pod } from "@kubernetes/client-node";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { Kube } from "../shared/kube.ts";
import { eventsOf } from "./helpers/backups.ts";
import { type ClusterClients, createCluster, etcdClient, patchSpec, waitReady } from "./helpers/clusters.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const V36 = newestPatchOf("3.6");
const cluster = await startLocalCluster({ name: "e2e-members" });
t.teardown(() => cluster.stop());
const { kc, core } = clientsFor(cluster.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const c: ClusterClients = { kube: new Kube(kc), core, custom };
await installCrds(kc);
const processes: OperatorProcess[] = [startOperatorProcess(cluster, "all")];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

async function podsOf(name: string): Promise<V1Pod[]> {
  const list = await core.listNamespacedPod({ namespace: NS, labelSelector: `etcd_cluster=${name}` });
  return list.items.filter((p) => !p.metadata?.deletionTimestamp);
}

async function claimsOf(name: string) {
  return (
    await core.listNamespacedPersistentVolumeClaim({ namespace: NS, labelSelector: `etcd_cluster=${name}` })
  ).items;
}

/** The status message of a refused create or patch (the API server's 422 body). */
async function refusal(work: Promise<unknown>): Promise<string> {
  try {
    await work;
  } catch (error) {
    const body = (error as { body?: unknown }).body;
    return typeof body === "string" ? body : JSON.stringify(body);
  }
  return "accepted";
}

t.test("every pod policy field reaches the pods, and the extra flags reach etcd", async (t) => {
  await kc.makeApiClient(SchedulingV1Api).createPriorityClass({
    body: { metadata: { name: "etcd-critical" }, value: 1_000_000, description: "etcd members" },
  });
  const policy = {
    labels: { team: "storage", "example.com/tier": "gold" },
    annotations: { "example.com/owner": "storage-team", note: "hello $(not a var) `not a command`" },
    nodeSelector: { "kubernetes.io/os": "linux" },
    tolerations: [{ key: "dedicated", operator: "Equal", value: "etcd", effect: "NoSchedule" }],
    resources: { requests: { cpu: "100m", memory: "64Mi" }, limits: { memory: "1Gi" } },
    securityContext: { fsGroup: 2000, runAsNonRoot: false },
    priorityClassName: "etcd-critical",
    busyboxImage: "docker.io/library/busybox:1.36",
    DNSTimeoutInSecond: 120,
    ClusterDomain: ".cluster.local",
    etcdEnv: [{ name: "ETCD_SNAPSHOT_COUNT", value: "5000" }],
    etcdArgs: ["--quota-backend-bytes=3221225472", "--max-txn-ops=512"],
  };
  await createCluster(c, NS, "policy", { size: 3, version: V36, pod: policy });
  await waitReady(c, NS, "policy", 3, 120_000);
  const pods = await podsOf("policy");
  t.equal(pods.length, 3);
  for (const pod of pods) {
    const name = pod.metadata?.name ?? "";
    const etcd = pod.spec?.containers.find((x) => x.name === "etcd");
    const init = pod.spec?.initContainers?.find((x) => x.name === "check-dns");
    t.match(
      pod.metadata?.labels,
      { ...policy.labels, app: "etcd", etcd_cluster: "policy" },
      `${name}: labels`,
    );
    t.match(pod.metadata?.annotations, policy.annotations, `${name}: annotations`);
    t.same(pod.spec?.nodeSelector, policy.nodeSelector, `${name}: nodeSelector`);
    t.match(pod.spec?.tolerations, policy.tolerations, `${name}: tolerations`);
    t.same(etcd?.resources, policy.resources, `${name}: resources`);
    t.same(pod.spec?.securityContext, policy.securityContext, `${name}: securityContext`);
    t.equal(pod.spec?.priorityClassName, "etcd-critical", `${name}: priorityClassName`);
    t.equal(pod.spec?.priority, 1_000_000, `${name}: the PriorityClass's priority was applied`);
    t.equal(init?.image, policy.busyboxImage, `${name}: the init container runs the busybox image given`);
    t.match(
      init?.env,
      [
        { name: "MEMBER_HOST", value: `${name}.policy.${NS}.svc.cluster.local` },
        { name: "TIMEOUT_SECONDS", value: "120" },
      ],
      `${name}: it waits for the member's DNS name in the cluster domain, up to DNSTimeoutInSecond`,
    );
    t.equal(
      pod.status?.initContainerStatuses?.[0]?.state?.terminated?.exitCode,
      0,
      `${name}: the DNS wait ran and succeeded`,
    );
    t.match(etcd?.env, policy.etcdEnv, `${name}: etcdEnv`);
    t.same(etcd?.command?.slice(-2), policy.etcdArgs, `${name}: etcdArgs come last on the command line`);
    t.ok(
      etcd?.command?.includes(
        `--initial-advertise-peer-urls=http://${name}.policy.${NS}.svc.cluster.local:2380`,
      ),
      `${name}: peer URL in the cluster domain`,
    );
    t.same(
      pod.spec?.affinity,
      {
        podAntiAffinity: {
          preferredDuringSchedulingIgnoredDuringExecution: [
            {
              weight: 100,
              podAffinityTerm: {
                labelSelector: { matchLabels: { app: "etcd", etcd_cluster: "policy" } },
                topologyKey: "kubernetes.io/hostname",
              },
            },
          ],
        },
      },
      `${name}: members prefer different nodes by default`,
    );
    const metrics = await (await fetch(`http://${pod.status?.podIP}:2379/metrics`)).text();
    t.match(
      metrics,
      /^etcd_server_quota_backend_bytes 3\.221225472e\+09$/m,
      `${name}: etcd runs with --quota-backend-bytes from etcdArgs`,
    );
  }
  const policyClient = await etcdClient(c, NS, "policy");
  const members = await policyClient.cluster.memberList({ linearizable: true });
  policyClient.close();
  t.ok(
    members.members.every((m) => m.peerURLs.every((u) => u.endsWith(".svc.cluster.local:2380"))),
    "etcd's member list carries the cluster-domain peer URLs",
  );

  await createCluster(c, NS, "spread", { size: 1, version: V36, pod: { antiAffinity: true } });
  await waitReady(c, NS, "spread", 1);
  const [spread] = await podsOf("spread");
  t.same(
    spread?.spec?.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution,
    [
      {
        labelSelector: { matchLabels: { app: "etcd", etcd_cluster: "spread" } },
        topologyKey: "kubernetes.io/hostname",
      },
    ],
    "antiAffinity: true → never two members on one node (a required anti-affinity)",
  );
});

t.test(
  "pods the API server refuses: the cluster shows Creating and says why, then starts once fixed",
  async (t) => {
    await createCluster(c, NS, "noclass", {
      size: 1,
      version: V36,
      pod: { priorityClassName: "no-such-class" },
    });
    const stuck = await waitFor(
      "the refused seed reported",
      async () => {
        const found = await c.kube.getCluster(NS, "noclass");
        const progressing = found?.status?.conditions?.find((x) => x.type === "Progressing");
        return progressing?.reason === "StepFailed" ? found : undefined;
      },
      { timeoutMs: 60_000 },
    );
    t.equal(stuck.status?.phase, "Creating", "a phase for `kubectl get etcd`");
    t.match(
      stuck.status?.conditions?.find((x) => x.type === "Progressing")?.message,
      /^seed failed \(retrying\): pods "noclass-[a-z0-9]+" is forbidden: no PriorityClass with name no-such-class was found$/,
    );
    const events = await eventsOf(c, NS, "EtcdCluster", "noclass");
    t.ok(
      events.some(
        (e) => e.reason === "StepFailed" && e.type === "Warning" && /no-such-class/.test(e.message ?? ""),
      ),
      "a StepFailed Warning Event names the cause",
    );
    t.ok(
      events.some((e) => e.reason === "ServicesCreated"),
      "the Services were made before the pods were refused",
    );
    t.equal((await podsOf("noclass")).length, 0, "no pod exists");
    await kc.makeApiClient(SchedulingV1Api).createPriorityClass({
      body: { metadata: { name: "no-such-class" }, value: 1_000, description: "made after the fact" },
    });
    await waitReady(c, NS, "noclass", 1, 120_000);
    t.pass("the seed goes through once the PriorityClass exists");
  },
);

t.test("an etcd flag the operator owns is refused clearly; a running cluster is left alone", async (t) => {
  const refused = await refusal(
    custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURAL,
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: "EtcdCluster",
        metadata: { name: "owned-flag" },
        spec: { size: 1, pod: { etcdArgs: ["--data-dir=/tmp/elsewhere"] } },
      },
    }),
  );
  t.match(refused, /--data-dir=\/tmp\/elsewhere sets a flag the operator sets itself/, "create refused");
  t.match(
    await refusal(
      custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace: NS,
        plural: PLURAL,
        name: "owned-flag",
      }),
    ),
    /not found/i,
  );

  const before = (await podsOf("policy")).map((p) => p.metadata?.uid).sort();
  for (const arg of [
    "--listen-client-urls=http://0.0.0.0:1",
    "--peer-cert-file=/x",
    "--initial-cluster-state=new",
  ]) {
    const message = await refusal(patchSpec(c, NS, "policy", { pod: { etcdArgs: [arg] } }));
    t.match(message, /sets a flag the operator sets itself/, `patch with ${arg.split("=")[0]} refused`);
  }
  t.match(
    await refusal(patchSpec(c, NS, "policy", { pod: { etcdArgs: ["quota-backend-bytes=1"] } })),
    /etcdArgs/,
    "a flag without its leading -- is refused",
  );
  await waitReady(c, NS, "policy", 3);
  t.same(
    (await podsOf("policy")).map((p) => p.metadata?.uid).sort(),
    before,
    "the running members are the same pods",
  );
});

t.test(
  "persistent volumes: a member comes back from a lost pod with its ID and data; volumes go with members",
  async (t) => {
    await createCluster(c, NS, "durable", {
      size: 3,
      version: V36,
      pod: { persistentVolumeClaimSpec: { resources: { requests: { storage: "1Gi" } } } },
    });
    await waitReady(c, NS, "durable", 3, 120_000);
    const claims = await claimsOf("durable");
    const pods = await podsOf("durable");
    t.same(
      claims.map((x) => x.metadata?.name).sort(),
      pods.map((p) => `${p.metadata?.name}-pvc`).sort(),
      "one claim per member, named after it",
    );
    t.ok(
      claims.every((x) =>
        x.metadata?.ownerReferences?.some((o) => o.kind === "EtcdCluster" && o.name === "durable"),
      ),
      "owned by the EtcdCluster",
    );
    t.ok(
      pods.every((p) =>
        p.spec?.volumes?.some((v) => v.persistentVolumeClaim?.claimName === `${p.metadata?.name}-pvc`),
      ),
      "each pod keeps its data on its claim",
    );

    const client = await etcdClient(c, NS, "durable");
    for (let i = 0; i < 100; i++) await client.put(`k${i}`).value(`v${i}`);
    const idsBefore = (await client.cluster.memberList({ linearizable: true })).members
      .map((m) => m.ID)
      .sort();
    client.close();

    const victim = pods[0]?.metadata?.name ?? "";
    const claim = claims.find((x) => x.metadata?.name === `${victim}-pvc`);
    const pv = await core.readPersistentVolume({ name: claim?.spec?.volumeName ?? "" });
    const walDir = join(pv.spec?.hostPath?.path ?? "", "data", "member", "wal");
    const walBefore = readdirSync(walDir).filter((f) => f.endsWith(".wal"));
    t.ok(walBefore.length > 0, `the member's log is on its volume (${walDir})`);

    await core.deleteNamespacedPod({ namespace: NS, name: victim, gracePeriodSeconds: 0 });
    await waitFor(
      `${victim} back`,
      async () => {
        const back = (await podsOf("durable")).find((p) => p.metadata?.name === victim);
        return back && back.metadata?.uid !== pods[0]?.metadata?.uid ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    await waitReady(c, NS, "durable", 3, 120_000);
    const after = await etcdClient(c, NS, "durable");
    t.same(
      (await after.cluster.memberList({ linearizable: true })).members.map((m) => m.ID).sort(),
      idsBefore,
      "the same member IDs",
    );
    after.close();
    const restarted = (await podsOf("durable")).find((p) => p.metadata?.name === victim);
    const checkDns = (pod: V1Pod | undefined) =>
      pod?.status?.initContainerStatuses?.find((x) => x.name === "check-dns")?.state?.terminated;
    t.match(
      checkDns(restarted)?.message,
      /no DNS wait: the member's write-ahead log is on its volume/,
      "back on its volume, the pod did not wait for its DNS name",
    );
    t.equal(checkDns(pods[1])?.exitCode, 0);
    t.equal(
      checkDns(pods[1])?.message ?? "",
      "",
      "a new member's pod on an empty volume waited for its name",
    );
    const local = await fetch(`http://${restarted?.status?.podIP}:2379/v3/kv/range`, {
      method: "POST",
      body: JSON.stringify({ key: Buffer.from("k99").toString("base64"), serializable: true }),
    });
    const range = (await local.json()) as { kvs?: { value: string }[] };
    t.equal(
      Buffer.from(range.kvs?.[0]?.value ?? "", "base64").toString(),
      "v99",
      "the restarted member serves the data from its own store",
    );
    t.ok(
      walBefore.every((f) => existsSync(join(walDir, f))),
      "its log files from before are still there: it restarted on its data, not from a snapshot",
    );
    const events = await eventsOf(c, NS, "EtcdCluster", "durable");
    t.ok(
      events.some((e) => e.reason === "MemberRestarted" && e.message?.includes(victim)),
      "a MemberRestarted Event",
    );
    t.notOk(
      events.some((e) => e.reason === "MemberReplaced"),
      "no member was replaced",
    );

    await patchSpec(c, NS, "durable", { size: 1 });
    await waitReady(c, NS, "durable", 1, 120_000);
    await waitFor(
      "claims of removed members deleted",
      async () => ((await claimsOf("durable")).length === 1 ? true : undefined),
      { timeoutMs: 60_000, intervalMs: 300 },
    );
    const [remaining] = await podsOf("durable");
    t.equal(
      (await claimsOf("durable"))[0]?.metadata?.name,
      `${remaining?.metadata?.name}-pvc`,
      "the last member keeps its claim",
    );
    t.ok(
      (await eventsOf(c, NS, "EtcdCluster", "durable")).filter((e) => e.reason === "VolumeDeleted").length >=
        2,
      "VolumeDeleted Events for the removed members",
    );

    await custom.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURAL,
      name: "durable",
    });
    await waitFor(
      "the deleted cluster's claims gone",
      async () => ((await claimsOf("durable")).length === 0 ? true : undefined),
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    await waitFor(
      "their volumes released",
      async () => {
        const pvs = (await core.listPersistentVolume()).items;
        return pvs.some((v) => v.spec?.claimRef?.name?.startsWith("durable-")) ? undefined : true;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    t.pass("the deleted cluster's claims and volumes are gone");
  },
);

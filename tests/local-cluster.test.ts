// End-to-end tests of the local control plane: real kube-apiserver, kube-controller-manager and
// etcd, and the process kubelet running pods as real processes in their own network namespaces.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import type { V1Container, V1Pod, V1Service } from "@kubernetes/client-node";
import { Etcd3 } from "etcd3";
import t from "tap";
import { ensureAssets } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import {
  clientsFor,
  eventsFor,
  isReady,
  readPod,
  waitFor,
  waitForPod,
  waitForPodGone,
} from "../infra/local/kube-wait.ts";

const NS = "default";
const assets = await ensureAssets();
const cluster = await startLocalCluster({ name: "e2e-local", redis: false });
t.teardown(() => cluster.stop());
const { core, apps } = clientsFor(cluster.kubeconfigPath);

function kubectl(...args: string[]): string {
  return execFileSync(assets.kubectl, ["--kubeconfig", cluster.kubeconfigPath, ...args], {
    encoding: "utf8",
  });
}

function headlessService(name: string, selector: Record<string, string>): V1Service {
  return {
    metadata: { name, namespace: NS },
    spec: {
      clusterIP: "None",
      publishNotReadyAddresses: true,
      selector,
      ports: [
        { name: "client", port: 2379 },
        { name: "peer", port: 2380 },
      ],
    },
  };
}

/** An etcd member pod addressed by `<name>.<subdomain>.default.svc`, like the operator's pods. */
function etcdPod(
  name: string,
  subdomain: string,
  version: string,
  initialCluster: string,
  labels: Record<string, string>,
): V1Pod {
  const dns = `${name}.${subdomain}.${NS}.svc`;
  return {
    metadata: { name, namespace: NS, labels },
    spec: {
      hostname: name,
      subdomain,
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: "etcd",
          image: `quay.io/coreos/etcd:v${version}`,
          command: [
            "/usr/local/bin/etcd",
            `--name=${name}`,
            "--data-dir=/var/etcd/data",
            "--listen-client-urls=http://0.0.0.0:2379",
            `--advertise-client-urls=http://${dns}:2379`,
            "--listen-peer-urls=http://0.0.0.0:2380",
            `--initial-advertise-peer-urls=http://${dns}:2380`,
            `--initial-cluster=${initialCluster}`,
            "--initial-cluster-state=new",
            `--initial-cluster-token=${subdomain}`,
          ],
          ports: [
            { name: "client", containerPort: 2379 },
            { name: "peer", containerPort: 2380 },
          ],
          readinessProbe: { httpGet: { path: "/health", port: 2379 }, periodSeconds: 1, failureThreshold: 3 },
          volumeMounts: [{ name: "data", mountPath: "/var/etcd" }],
        },
      ],
      volumes: [{ name: "data", emptyDir: {} }],
    },
  };
}

/** A run-once pod whose shell script must exit 0; returns its final status. */
async function runToCompletion(name: string, image: string, script: string): Promise<V1Pod> {
  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name, namespace: NS },
      spec: {
        restartPolicy: "Never",
        containers: [{ name: "main", image, command: ["/bin/sh", "-c", script] }],
      },
    },
  });
  return waitForPod(
    core,
    NS,
    name,
    "to finish",
    (p) => p.status?.phase === "Succeeded" || p.status?.phase === "Failed",
    60_000,
  );
}

t.test("the node registers Ready and kubectl sees it", async (t) => {
  const out = kubectl("get", "nodes", "-o", "wide");
  t.match(out, /local-node\s+Ready/);
  t.match(out, new RegExp(`v${assets.kubernetesVersion.replace(/\./g, "\\.")}`));
  const version = JSON.parse(kubectl("version", "-o", "json")) as { serverVersion: { gitVersion: string } };
  t.equal(
    version.serverVersion.gitVersion,
    `v${assets.kubernetesVersion}`,
    "/version reports the pinned release",
  );
});

for (const build of assets.etcd) {
  const tag = build.minor.replace(".", "");
  t.test(
    `an etcd ${build.minor} pod becomes Ready, is reached by DNS name from another pod, and keeps a key`,
    async (t) => {
      const name = `etcd-${tag}`;
      const subdomain = `single-${tag}`;
      await core.createNamespacedService({ namespace: NS, body: headlessService(subdomain, { app: name }) });
      await core.createNamespacedPod({
        namespace: NS,
        body: etcdPod(name, subdomain, build.version, `${name}=http://${name}.${subdomain}.${NS}.svc:2380`, {
          app: name,
        }),
      });
      const pod = await waitForPod(core, NS, name, "Ready", isReady, 60_000);
      const ip = pod.status?.podIP ?? "";
      t.match(
        ip,
        new RegExp(`^${cluster.network.base.replace(/\./g, "\\.")}\\.\\d+$`),
        "the pod has its own IP on the bridge",
      );
      t.equal(pod.status?.containerStatuses?.[0]?.imageID, `local://etcd@v${build.version}`);

      const endpoint = `http://${name}.${subdomain}.${NS}.svc:2379`;
      const writer = await runToCompletion(
        `writer-${tag}`,
        `quay.io/coreos/etcd:v${build.version}`,
        `etcdctl --endpoints=${endpoint} put greeting hello-${tag} && test "$(etcdctl --endpoints=${endpoint} get greeting --print-value-only)" = hello-${tag}`,
      );
      t.equal(writer.status?.phase, "Succeeded", "a second pod wrote and read the key by DNS name");
      t.not(writer.status?.podIP, ip, "the writer ran in a pod of its own");

      const client = new Etcd3({ hosts: [`http://${ip}:2379`] });
      t.teardown(() => client.close());
      t.equal(
        await client.get("greeting").string(),
        `hello-${tag}`,
        "the host reads the key back over the bridge",
      );
      const status = await client.maintenance.status();
      t.equal(status.version, build.version, "the member runs the built version");
    },
  );
}

t.test(
  "three etcd pods bootstrapped statically under a headless Service form a cluster and elect a leader",
  async (t) => {
    const build = assets.etcd[assets.etcd.length - 1];
    if (!build) throw new Error("no etcd build");
    const names = ["trio-0", "trio-1", "trio-2"];
    const initial = names.map((n) => `${n}=http://${n}.trio.${NS}.svc:2380`).join(",");
    await core.createNamespacedService({ namespace: NS, body: headlessService("trio", { app: "trio" }) });
    for (const name of names) {
      await core.createNamespacedPod({
        namespace: NS,
        body: etcdPod(name, "trio", build.version, initial, { app: "trio" }),
      });
    }
    const pods = await Promise.all(names.map((n) => waitForPod(core, NS, n, "Ready", isReady, 90_000)));
    const hosts = pods.map((p) => `http://${p.status?.podIP}:2379`);
    t.equal(new Set(hosts).size, 3, "each member has its own IP");
    const client = new Etcd3({ hosts });
    t.teardown(() => client.close());
    const members = await client.cluster.memberList({});
    t.equal(members.members.length, 3, "three members");
    const status = await client.maintenance.status();
    t.not(status.leader, "0", "a leader is elected");
    await client.put("trio-key").value("written-once");
    for (const host of hosts) {
      const single = new Etcd3({ hosts: [host] });
      t.equal(await single.get("trio-key").string(), "written-once", `${host} serves the replicated key`);
      single.close();
    }
    const wide = kubectl("get", "pods", "-o", "wide");
    for (const pod of pods)
      t.match(
        wide,
        new RegExp(`${pod.metadata?.name}\\s+1/1\\s+Running.*${pod.status?.podIP?.replace(/\./g, "\\.")}`),
      );
  },
);

t.test("deleting a pod stops its processes and removes the object", async (t) => {
  const pod = await runToCompletion("sleeper-probe", "busybox", "true");
  t.equal(pod.status?.phase, "Succeeded");
  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "sleeper", namespace: NS },
      spec: {
        terminationGracePeriodSeconds: 3,
        containers: [{ name: "main", image: "busybox", command: ["sleep", "3600"] }],
      },
    },
  });
  const running = await waitForPod(core, NS, "sleeper", "Ready", isReady);
  const uid = running.metadata?.uid ?? "";
  const netns = `${cluster.network.netnsPrefix}${uid.replace(/-/g, "").slice(0, 8)}`;
  t.ok(existsSync(`/run/netns/${netns}`), "the pod has a network namespace");
  const pids = execFileSync("ip", ["netns", "pids", netns], { encoding: "utf8" })
    .trim()
    .split("\n")
    .filter(Boolean);
  t.ok(pids.length > 0, "a process runs in it");
  await core.deleteNamespacedPod({ name: "sleeper", namespace: NS });
  await waitForPodGone(core, NS, "sleeper", 30_000);
  for (const pid of pids) t.notOk(existsSync(`/proc/${pid}`), `process ${pid} is gone`);
  t.notOk(existsSync(`/run/netns/${netns}`), "the network namespace is gone");
});

t.test(
  "a container whose image is changed restarts with it, even under restartPolicy Never (as a kubelet does)",
  async (t) => {
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: "never-restarts", namespace: NS },
        spec: {
          restartPolicy: "Never",
          terminationGracePeriodSeconds: 2,
          containers: [{ name: "main", image: "busybox:1.28.0-glibc", command: ["sleep", "3600"] }],
        },
      },
    });
    const before = await waitForPod(
      core,
      NS,
      "never-restarts",
      "Running",
      (p) => p.status?.phase === "Running",
    );
    const firstId = before.status?.containerStatuses?.[0]?.containerID;
    kubectl("set", "image", "pod/never-restarts", "main=busybox:1.36.1");
    const after = await waitForPod(core, NS, "never-restarts", "running the new image", (p) => {
      const s = p.status?.containerStatuses?.[0];
      return s?.image === "busybox:1.36.1" && s.state?.running !== undefined;
    });
    const status = after.status?.containerStatuses?.[0];
    t.equal(after.status?.phase, "Running", "the pod stays Running, not Failed");
    t.equal(status?.restartCount, 1, "the container was restarted once");
    t.not(status?.containerID, firstId, "a new container runs");
    const events = await eventsFor(core, NS, "never-restarts");
    t.ok(
      events.some((e) => e.reason === "Killing" && /definition changed/.test(e.message ?? "")),
      "Killing event for the changed definition",
    );
    await core.deleteNamespacedPod({ name: "never-restarts", namespace: NS, gracePeriodSeconds: 0 });
  },
);

t.test("deleting an owner makes the garbage collector delete its dependents", async (t) => {
  const owner = await core.createNamespacedConfigMap({
    namespace: NS,
    body: { metadata: { name: "owner", namespace: NS } },
  });
  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: {
        name: "dependent",
        namespace: NS,
        ownerReferences: [
          { apiVersion: "v1", kind: "ConfigMap", name: "owner", uid: owner.metadata?.uid ?? "" },
        ],
      },
      spec: {
        terminationGracePeriodSeconds: 2,
        containers: [{ name: "main", image: "busybox", command: ["sleep", "3600"] }],
      },
    },
  });
  await waitForPod(core, NS, "dependent", "Ready", isReady);
  await core.deleteNamespacedConfigMap({ name: "owner", namespace: NS });
  await waitForPodGone(core, NS, "dependent", 60_000);
  t.pass("the dependent pod was collected");
});

t.test(
  "a Deployment's and a StatefulSet's pods run (workload controllers on, PVCs provisioned)",
  async (t) => {
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "web", namespace: NS },
        spec: {
          replicas: 2,
          selector: { matchLabels: { app: "web" } },
          template: {
            metadata: { labels: { app: "web" } },
            spec: {
              terminationGracePeriodSeconds: 2,
              containers: [{ name: "main", image: "busybox", command: ["sleep", "3600"] }],
            },
          },
        },
      },
    });
    await waitFor("deployment web to have 2 ready replicas", async () => {
      const d = await apps.readNamespacedDeployment({ name: "web", namespace: NS });
      return d.status?.readyReplicas === 2 ? true : undefined;
    });
    await core.createNamespacedService({ namespace: NS, body: headlessService("ss", { app: "ss" }) });
    await apps.createNamespacedStatefulSet({
      namespace: NS,
      body: {
        metadata: { name: "ss", namespace: NS },
        spec: {
          serviceName: "ss",
          replicas: 2,
          selector: { matchLabels: { app: "ss" } },
          template: {
            metadata: { labels: { app: "ss" } },
            spec: {
              terminationGracePeriodSeconds: 2,
              containers: [
                {
                  name: "main",
                  image: "busybox",
                  // Each replica writes its name to its own volume and checks it can resolve its peer.
                  command: ["/bin/sh", "-c", 'echo "$HOSTNAME" > /data/name && exec sleep 3600'],
                  volumeMounts: [{ name: "data", mountPath: "/data" }],
                },
              ],
            },
          },
          volumeClaimTemplates: [
            {
              metadata: { name: "data" },
              spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
            },
          ],
        },
      },
    });
    await waitFor(
      "statefulset ss to have 2 ready replicas",
      async () => {
        const s = await apps.readNamespacedStatefulSet({ name: "ss", namespace: NS });
        return s.status?.readyReplicas === 2 ? true : undefined;
      },
      { timeoutMs: 90_000 },
    );
    const claim = await core.readNamespacedPersistentVolumeClaim({ name: "data-ss-0", namespace: NS });
    t.equal(claim.status?.phase, "Bound", "the claim was provisioned and bound");
    const pv = await core.readPersistentVolume({ name: claim.spec?.volumeName ?? "" });
    const path = pv.spec?.hostPath?.path ?? "";
    t.equal(readFileSync(`${path}/name`, "utf8").trim(), "ss-0", "the pod wrote into its persistent volume");
    const peer = await runToCompletion(
      "dns-check",
      "busybox",
      "getent hosts ss-1.ss.default.svc.cluster.local && getent hosts ss-0.ss",
    );
    t.equal(peer.status?.phase, "Succeeded", "StatefulSet pods resolve by their stable DNS names");
  },
);

t.test("bad input shows the status a real kubelet shows and disturbs nothing else", async (t) => {
  const etcdBefore = await readPod(core, NS, "trio-0");
  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "bad-image", namespace: NS },
      spec: { containers: [{ name: "main", image: "example.com/nope/unknown:1.0" }] },
    },
  });
  const pulled = await waitForPod(core, NS, "bad-image", "ErrImagePull or ImagePullBackOff", (p) =>
    ["ErrImagePull", "ImagePullBackOff"].includes(
      p.status?.containerStatuses?.[0]?.state?.waiting?.reason ?? "",
    ),
  );
  t.equal(pulled.status?.phase, "Pending");
  t.match(pulled.status?.containerStatuses?.[0]?.state?.waiting?.message ?? "", /unknown:1\.0.*not found/);

  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "exits", namespace: NS },
      spec: {
        containers: [{ name: "main", image: "busybox", command: ["/bin/sh", "-c", "echo bye; exit 3"] }],
      },
    },
  });
  const crashed = await waitForPod(core, NS, "exits", "in CrashLoopBackOff", (p) => {
    const s = p.status?.containerStatuses?.[0];
    return s?.state?.waiting?.reason === "CrashLoopBackOff" && (s.restartCount ?? 0) >= 1;
  });
  const last = crashed.status?.containerStatuses?.[0]?.lastState?.terminated;
  t.equal(last?.exitCode, 3, "last state carries the exit code");
  t.equal(last?.reason, "Error");
  t.equal(crashed.status?.phase, "Running", "a crash-looping pod is Running, as with a real kubelet");

  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "never-ready", namespace: NS },
      spec: {
        containers: [
          {
            name: "main",
            image: "busybox",
            command: ["sleep", "3600"],
            readinessProbe: { exec: { command: ["/bin/sh", "-c", "exit 1"] }, periodSeconds: 1 },
            livenessProbe: { tcpSocket: { port: 9 }, periodSeconds: 1, failureThreshold: 2 },
          },
        ],
      },
    },
  });
  const restarted = await waitForPod(
    core,
    NS,
    "never-ready",
    "restarted by its liveness probe",
    (p) => (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1,
    60_000,
  );
  t.notOk(isReady(restarted), "a failing readiness probe keeps the pod not Ready");
  const events = await eventsFor(core, NS, "never-ready");
  t.ok(
    events.some((e) => e.reason === "Unhealthy" && /Readiness probe failed/.test(e.message)),
    "Unhealthy event for readiness",
  );
  t.ok(
    events.some((e) => e.reason === "Killing" && /liveness/.test(e.message)),
    "Killing event for liveness",
  );

  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "no-such-command", namespace: NS },
      spec: {
        restartPolicy: "Never",
        containers: [{ name: "main", image: "busybox", command: ["definitely-not-a-command"] }],
      },
    },
  });
  const notFound = await waitForPod(
    core,
    NS,
    "no-such-command",
    "Failed",
    (p) => p.status?.phase === "Failed",
  );
  t.equal(notFound.status?.containerStatuses?.[0]?.state?.terminated?.reason, "StartError");

  const etcdAfter = await readPod(core, NS, "trio-0");
  t.equal(
    etcdAfter?.status?.containerStatuses?.[0]?.restartCount,
    etcdBefore?.status?.containerStatuses?.[0]?.restartCount,
    "other pods kept running",
  );
  t.ok(etcdAfter && isReady(etcdAfter), "and stay Ready");
});

t.test("a container's termination message reaches its status as a real kubelet reports it", async (t) => {
  const container = (name: string, script: string, extra: Partial<V1Container> = {}): V1Container => ({
    name,
    image: "busybox",
    command: ["/bin/sh", "-c", script],
    ...extra,
  });
  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "says-why", namespace: NS },
      spec: {
        restartPolicy: "Never",
        containers: [
          container("file", "printf 'backup is corrupt' > /dev/termination-log; exit 3"),
          container("custom-path", "printf 'done' > /tmp/why; exit 0", {
            terminationMessagePath: "/tmp/why",
          }),
          container("logs", "echo first; echo 'last words'; exit 1", {
            terminationMessagePolicy: "FallbackToLogsOnError",
          }),
          container("silent", "echo not a message; exit 1"),
        ],
      },
    },
  });
  const done = await waitForPod(
    core,
    NS,
    "says-why",
    "to finish",
    (p) => p.status?.phase === "Failed",
    60_000,
  );
  const terminated = (name: string) =>
    done.status?.containerStatuses?.find((s) => s.name === name)?.state?.terminated;
  t.equal(terminated("file")?.message, "backup is corrupt", "written to /dev/termination-log");
  t.equal(terminated("file")?.exitCode, 3);
  t.equal(terminated("custom-path")?.message, "done", "at the container's terminationMessagePath");
  t.equal(terminated("logs")?.message, "first\nlast words", "FallbackToLogsOnError: the log's tail");
  t.equal(terminated("silent")?.message, undefined, "the default policy never reads the log");
  await core.deleteNamespacedPod({ namespace: NS, name: "says-why" });
});

t.test("volumes, env and init containers work as on a real node", async (t) => {
  await core.createNamespacedSecret({
    namespace: NS,
    body: { metadata: { name: "creds", namespace: NS }, stringData: { user: "alice", "tls.crt": "CERT" } },
  });
  await core.createNamespacedConfigMap({
    namespace: NS,
    body: { metadata: { name: "settings", namespace: NS }, data: { mode: "fast", "app.conf": "a=1\n" } },
  });
  // Every check runs inside the container; a failed one exits non-zero and the pod ends Failed.
  const checks = [
    'test "$(cat /secret/user)" = alice',
    'test "$(cat /secret/certs/tls.crt)" = CERT',
    'test "$(cat /config/app.conf)" = a=1',
    'test "$(cat /info/name)" = wired',
    'grep -q "tier=\\"backend\\"" /info/labels',
    'test "$(cat /shared/from-init)" = first-second',
    'test "$USER_NAME" = alice && test "$MODE" = fast && test "$URL" = "http://$POD_IP:2379"',
    'test "$POD_NAME" = wired && test "$POD_NAMESPACE" = default && test -n "$POD_IP"',
    'test "$CFG_mode" = fast',
    "test -s /var/run/secrets/kubernetes.io/serviceaccount/token",
    'test "$(hostname)" = wired',
    'test "$(pwd)" = /shared',
    "touch /secret/x 2>/dev/null && exit 9 || true",
  ].join(" && ");
  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "wired", namespace: NS, labels: { tier: "backend" } },
      spec: {
        restartPolicy: "Never",
        initContainers: [
          {
            name: "first",
            image: "busybox",
            command: ["/bin/sh", "-c", "printf first > /shared/from-init"],
            volumeMounts: [{ name: "shared", mountPath: "/shared" }],
          },
          {
            name: "second",
            image: "busybox",
            command: ["/bin/sh", "-c", "printf -- -second >> /shared/from-init"],
            volumeMounts: [{ name: "shared", mountPath: "/shared" }],
          },
        ],
        containers: [
          {
            name: "main",
            image: "busybox",
            command: ["/bin/sh", "-c", checks],
            workingDir: "/shared",
            env: [
              { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
              { name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
              { name: "POD_IP", valueFrom: { fieldRef: { fieldPath: "status.podIP" } } },
              { name: "URL", value: "http://$(POD_IP):2379" },
              { name: "USER_NAME", valueFrom: { secretKeyRef: { name: "creds", key: "user" } } },
              { name: "MODE", valueFrom: { configMapKeyRef: { name: "settings", key: "mode" } } },
            ],
            envFrom: [{ prefix: "CFG_", configMapRef: { name: "settings" } }],
            volumeMounts: [
              { name: "secret", mountPath: "/secret", readOnly: true },
              { name: "config", mountPath: "/config" },
              { name: "info", mountPath: "/info" },
              { name: "shared", mountPath: "/shared" },
            ],
          },
        ],
        volumes: [
          {
            name: "secret",
            secret: {
              secretName: "creds",
              items: [
                { key: "user", path: "user" },
                { key: "tls.crt", path: "certs/tls.crt" },
              ],
            },
          },
          { name: "config", configMap: { name: "settings" } },
          {
            name: "info",
            downwardAPI: {
              items: [
                { path: "name", fieldRef: { fieldPath: "metadata.name" } },
                { path: "labels", fieldRef: { fieldPath: "metadata.labels" } },
              ],
            },
          },
          { name: "shared", emptyDir: {} },
        ],
      },
    },
  });
  const done = await waitForPod(core, NS, "wired", "to finish", (p) =>
    ["Succeeded", "Failed"].includes(p.status?.phase ?? ""),
  );
  t.equal(done.status?.phase, "Succeeded", "every check inside the container passed");
  t.same(
    done.status?.initContainerStatuses?.map((s) => [s.name, s.state?.terminated?.exitCode]),
    [
      ["first", 0],
      ["second", 0],
    ],
    "init containers ran in order and completed",
  );

  await core.createNamespacedPod({
    namespace: NS,
    body: {
      metadata: { name: "missing-secret", namespace: NS },
      spec: {
        containers: [
          {
            name: "main",
            image: "busybox",
            command: ["sleep", "60"],
            env: [{ name: "X", valueFrom: { secretKeyRef: { name: "no-such-secret", key: "k" } } }],
          },
        ],
      },
    },
  });
  const blocked = await waitForPod(
    core,
    NS,
    "missing-secret",
    "CreateContainerConfigError",
    (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === "CreateContainerConfigError",
  );
  t.match(blocked.status?.containerStatuses?.[0]?.state?.waiting?.message ?? "", /no-such-secret/);
});

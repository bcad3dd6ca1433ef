// Unit tests of the process kubelet's pure rules: image mapping, $(VAR) expansion, cluster DNS
// records in /etc/hosts, and back-off. The end-to-end behaviour is in local-cluster.test.ts.
import type { V1Pod, V1Service } from "@kubernetes/client-node";
import t from "tap";
import { nextBackoff } from "../infra/local/kubelet/container-state.ts";
import { containerArgv, expandVars } from "../infra/local/kubelet/env.ts";
import { clusterRecords, hostsFileFor } from "../infra/local/kubelet/hosts.ts";
import { etcdMinorOfTag, ImagePullError, parseImage, resolveImage } from "../infra/local/kubelet/images.ts";
import { nextProbeAt } from "../infra/local/kubelet/probes.ts";

const builds = [
  { version: "3.5.35", minor: "3.5", binDir: "/cache/etcd-v3.5.35" },
  { version: "3.6.16", minor: "3.6", binDir: "/cache/etcd-v3.6.16" },
];

t.test("images of any registry map to the etcd build of their minor", async (t) => {
  t.same(parseImage("quay.io/coreos/etcd:v3.5.17"), {
    repository: "quay.io/coreos/etcd",
    name: "etcd",
    tag: "v3.5.17",
  });
  t.same(parseImage("localhost:5000/etcd"), {
    repository: "localhost:5000/etcd",
    name: "etcd",
    tag: "latest",
  });
  t.equal(etcdMinorOfTag("3.6.4-0"), "3.6");
  t.equal(etcdMinorOfTag("latest"), undefined);
  const resolved = resolveImage("registry.k8s.io/etcd:3.6.4-0", builds);
  t.equal(resolved.runsVersion, "3.6.16");
  t.same(resolved.mounts, [{ source: "/cache/etcd-v3.6.16", target: "/usr/local/bin", readOnly: true }]);
  t.same(resolveImage("busybox:1.36", builds).cmd, ["sh"]);
  t.throws(
    () => resolveImage("quay.io/coreos/etcd:v3.2.13", builds),
    ImagePullError,
    "an unbuilt minor cannot be pulled",
  );
  t.throws(() => resolveImage("nginx:latest", builds), /nginx:latest: not found/);
});

t.test("$(VAR) expands like Kubernetes: known names only, $$ escapes", async (t) => {
  const vars = { A: "1", POD_IP: "10.0.0.2" };
  t.equal(expandVars("http://$(POD_IP):2379", vars), "http://10.0.0.2:2379");
  t.equal(expandVars("$(MISSING)-$(A)", vars), "$(MISSING)-1");
  t.equal(expandVars("$$(A) $$ $(A", vars), "$(A) $ $(A");
  const image = { entrypoint: ["/bin/entry"], cmd: ["default-cmd"] };
  t.same(
    containerArgv({ name: "c" }, image, vars),
    ["/bin/entry", "default-cmd"],
    "no command, no args: the image's own",
  );
  t.same(
    containerArgv({ name: "c", args: ["--x=$(A)"] }, image, vars),
    ["/bin/entry", "--x=1"],
    "args replace CMD",
  );
  t.same(
    containerArgv({ name: "c", command: ["run", "$(A)"] }, image, vars),
    ["run", "1"],
    "command drops CMD",
  );
  t.same(containerArgv({ name: "c", command: ["run"], args: ["x"] }, image, vars), ["run", "x"]);
});

function pod(
  name: string,
  labels: Record<string, string>,
  ip: string,
  ready: boolean,
  extra: Partial<V1Pod["spec"]> = {},
): V1Pod {
  return {
    metadata: { name, namespace: "db", labels },
    spec: { containers: [], ...extra },
    status: {
      phase: "Running",
      podIP: ip,
      conditions: [{ type: "Ready", status: ready ? "True" : "False" }],
    },
  };
}

function service(
  name: string,
  selector: Record<string, string>,
  headless: boolean,
  publishNotReady = false,
): V1Service {
  return {
    metadata: { name, namespace: "db" },
    spec: {
      selector,
      clusterIP: headless ? "None" : "10.96.0.10",
      publishNotReadyAddresses: publishNotReady,
    },
  };
}

t.test("hosts files carry the names cluster DNS would answer", async (t) => {
  const pods = [
    pod("m0", { app: "e" }, "10.78.0.2", true, { hostname: "m0", subdomain: "peers" }),
    pod("m1", { app: "e" }, "10.78.0.3", false, { hostname: "m1", subdomain: "peers" }),
    pod("other", { app: "x" }, "10.78.0.9", true),
  ];
  const services = [service("peers", { app: "e" }, true, true), service("client", { app: "e" }, false)];
  const records = clusterRecords(pods, services);
  const inNamespace = hostsFileFor(pods[2] as V1Pod, records);
  t.match(
    inNamespace,
    /10\.78\.0\.3\t.*m1\.peers\.db\.svc\.cluster\.local/,
    "not-ready pod published by publishNotReadyAddresses",
  );
  t.match(inNamespace, /10\.78\.0\.2\t.*client\.db\.svc/, "a ClusterIP service resolves to its ready pods");
  t.notMatch(inNamespace, /10\.78\.0\.3\t.*client\.db\.svc/, "…but not to unready ones");
  t.match(inNamespace, /10\.78\.0\.2\t.* m0\.peers( |$)/m, "short forms within the namespace");
  t.match(inNamespace, /10\.78\.0\.9\tother/, "the pod's own hostname");
  const elsewhere = hostsFileFor(
    { ...pods[2], metadata: { name: "far", namespace: "other" } } as V1Pod,
    records,
  );
  t.notMatch(elsewhere, / m0\.peers( |$)/m, "no short forms from another namespace");
  t.match(elsewhere, /m0\.peers\.db\.svc/, "fully qualified names from anywhere");
});

t.test("restart back-off doubles from 10 s and stops at 5 min", async (t) => {
  const steps = [0];
  for (let i = 0; i < 8; i++) steps.push(nextBackoff(steps[steps.length - 1] ?? 0));
  t.same(steps, [0, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]);
});

t.test("probes keep to their period's grid, as the kubelet's probe ticker does", async (t) => {
  t.equal(nextProbeAt(1_000, 1_000, 1_000), 2_000, "on time: one period later");
  t.equal(nextProbeAt(1_000, 1_400, 1_000), 2_000, "run late: the next one is not pushed back");
  t.equal(nextProbeAt(1_000, 3_500, 10_000), 11_000);
  t.equal(nextProbeAt(1_000, 3_500, 1_000), 4_000, "ticks missed meanwhile are dropped, not run in a burst");
  t.equal(nextProbeAt(1_000, 3_000, 1_000), 4_000, "a run exactly on a later tick counts as that tick");
});

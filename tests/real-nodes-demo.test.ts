// `npm run demo -- --real-nodes`, run the way a newcomer runs it: three containerd/kubelet nodes,
// the operator's image built from the Dockerfile and installed with `helm install`, the seeds'
// example cluster Available. The printed lines must work when followed literally (kubectl and helm
// through the printed KUBECONFIG and aliases, etcdctl, the HTTP trigger through the chart's
// Service with curl), and Ctrl-C must leave nothing: no process, mount, network namespace,
// cgroup, bridge or file of the instance.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import t from "tap";
import { waitFor } from "../infra/local/kube-wait.ts";
import { mountsUnder } from "../infra/local/nodes/host-state.ts";
import { realNodeLayouts } from "../infra/local/nodes/layout.ts";
import { instanceLeftovers, newcomerEnv, printedCommand, printedLine, startDemo } from "./helpers/demo.ts";

const NAME = "demo-nodes";
const NODES = 3;
const leftovers = instanceLeftovers(NAME);

const started = Date.now();
const demo = startDemo(t, ["--real-nodes", "--name", NAME]);
const instructions = await demo.instructions();
t.comment(`instructions printed after ${((Date.now() - started) / 1000).toFixed(1)} s`);
const printed = (marker: string) => printedCommand(instructions, marker);
const kubeconfig = printed("export KUBECONFIG=")[1]?.slice("KUBECONFIG=".length) ?? "";
const kubectl = printed("alias kubectl=")[1]?.slice("kubectl=".length) ?? "";
const helm = printed("alias helm=")[1]?.slice("helm=".length) ?? "";

/** A printed command line, run with the printed KUBECONFIG and aliases as a shell would. */
function runPrinted(marker: string, extra = ""): string {
  const script = [
    "shopt -s expand_aliases",
    `export KUBECONFIG=${kubeconfig}`,
    `alias kubectl=${kubectl}`,
    `alias helm=${helm}`,
    `${printedLine(instructions, marker)} ${extra}`,
  ].join("\n");
  return execFileSync("bash", ["-c", script], { encoding: "utf8", env: newcomerEnv });
}

t.test("the operator is installed with Helm and the example is Available on real nodes", async (t) => {
  const { stderr } = demo.output();
  t.match(stderr, /helm install etcd-operator charts\/etcd-operator/, "installed with helm install");
  t.match(stderr, /STATUS: deployed/, "the release is deployed");
  t.match(instructions, /EtcdCluster example-etcd-cluster is Available after [\d.]+ s: 3 members/);
  t.match(stderr, /members ready 3\/3/, "progress shows the members joining");
  t.ok(existsSync(kubeconfig) && existsSync(kubectl) && existsSync(helm), "printed paths exist");
});

t.test("the printed kubectl and helm lines work", async (t) => {
  t.match(runPrinted("get etcd "), /example-etcd-cluster\s+3\s+3\s+\S+\s+Running/, "kubectl get etcd");
  // The operator counts a member ready once etcd answers; its pod's readiness probe may follow later.
  const readyNodes = (wide: string) =>
    new Set(
      [...wide.matchAll(/^example-etcd-cluster-\S+\s+1\/1\s+Running.*\s(node-\d)\s/gm)].map((m) => m[1]),
    );
  let wide = "";
  await waitFor(
    "three Ready member pods",
    async () => {
      wide = runPrinted("get pods -o wide");
      return readyNodes(wide).size === NODES ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 1000, describe: async () => wide },
  ).catch(() => undefined);
  t.equal(readyNodes(wide).size, NODES, `the members run one per real node:\n${wide}`);
  t.match(runPrinted(" status etcd-operator"), /STATUS: deployed/, "helm status");
  const operatorPods = runPrinted("# the operator's pods");
  t.ok(
    (operatorPods.match(/\s1\/1\s+Running/g)?.length ?? 0) >= 4,
    `controller, workers, HTTP server and Redis run:\n${operatorPods}`,
  );
});

t.test("the printed etcdctl lines put and get a key", async (t) => {
  const [etcdctl, ...putArgs] = printed(" put hello world");
  t.equal(execFileSync(etcdctl ?? "", putArgs, { encoding: "utf8" }).trim(), "OK");
  const [, ...getArgs] = printed(" get hello");
  t.equal(execFileSync(etcdctl ?? "", getArgs, { encoding: "utf8" }).trim(), "hello\nworld");
});

t.test("the printed curl triggers a reconcile through the chart's Service", async (t) => {
  const status = runPrinted("curl -k -X POST", '-s -o /dev/null -w "%{http_code}"');
  t.equal(status, "202", "POST …/reconcile with a ServiceAccount token answers 202");
});

t.test("Ctrl-C leaves no process, mount, namespace, cgroup, bridge or file", async (t) => {
  const dir = leftovers.layout.dir;
  t.ok(leftovers.netns().length >= NODES, "the nodes' network namespaces exist before");
  const exit = await demo.interrupt();
  const { stderr } = demo.output();
  t.comment(`npm exited with ${exit.code ?? exit.signal}`);
  t.notMatch(stderr, /demo failed/, "no failure while stopping");
  t.match(stderr, /everything stopped/);
  t.same(
    await leftovers.exited(demo.group, "every process of the demo to exit"),
    [],
    "no process of the demo, its control plane, nodes or pods",
  );
  t.same(mountsUnder(dir), [], "no mount");
  t.same(leftovers.netns(), [], "no network namespace");
  const cgroups = realNodeLayouts(leftovers.layout, NODES).flatMap((node) =>
    readdirSync("/sys/fs/cgroup").filter((h) => existsSync(join("/sys/fs/cgroup", h, node.cgroupRoot))),
  );
  t.same(cgroups, [], "no cgroup of a node");
  t.notOk(leftovers.bridgeExists(), "no bridge");
  t.notOk(existsSync(dir), "no files");
});

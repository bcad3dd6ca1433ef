// Command line for the local control plane:
//   node infra/local/cli.ts up [--name N] [--foreground] [--object-store] [--real-nodes N]
//                                                         start (--foreground: stop on Ctrl-C;
//                                                         --object-store: with the S3 store too;
//                                                         --real-nodes: N containerd/kubelet nodes
//                                                         with kube-proxy and CoreDNS instead of
//                                                         the process kubelet)
//   node infra/local/cli.ts down [--name N]                stop and clean up
//   node infra/local/cli.ts status [--name N]              what runs, where the kubeconfig is
import { parseArgs } from "node:util";
import {
  cleanupInstance,
  daemonStatus,
  type LocalClusterState,
  readState,
  startLocalCluster,
} from "./control-plane.ts";
import { DEFAULT_INSTANCE } from "./layout.ts";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    name: { type: "string", default: DEFAULT_INSTANCE },
    foreground: { type: "boolean", default: false },
    "object-store": { type: "boolean", default: false },
    "real-nodes": { type: "string" },
  },
});
const command = positionals[0] ?? "status";
const name = values.name;
const log = (line: string) => process.stderr.write(`[local ${name}] ${line}\n`);

function printUsage(cluster: LocalClusterState): void {
  const store = cluster.objectStore;
  process.stdout.write(
    [
      "",
      "Local control plane is up.",
      `  export KUBECONFIG=${cluster.kubeconfigPath}`,
      "  kubectl get nodes",
      "  kubectl get pods -A -o wide",
      ...(store
        ? [
            `S3 object store: ${store.endpoint} (region ${store.region}, path-style, access key ${store.accessKeyId};`,
            `  the secret key is in ${store.credentialsFile})`,
          ]
        : []),
      "",
    ].join("\n"),
  );
}

switch (command) {
  case "up": {
    const realNodes = values["real-nodes"] === undefined ? undefined : Number(values["real-nodes"]);
    if (realNodes !== undefined && !Number.isInteger(realNodes)) {
      throw new Error(`--real-nodes takes a number of nodes, not "${values["real-nodes"]}"`);
    }
    const cluster = await startLocalCluster({ name, log, objectStore: values["object-store"], realNodes });
    printUsage(cluster);
    if (values.foreground) {
      log("running; press Ctrl-C to stop");
      let stopping = false;
      const stop = () => {
        if (stopping) return;
        stopping = true;
        void cluster.stop().then(() => process.exit(0));
      };
      process.on("SIGINT", stop);
      process.on("SIGTERM", stop);
      setInterval(() => {}, 1 << 30);
    }
    break;
  }
  case "down":
    await cleanupInstance(name, log);
    log("down");
    break;
  case "status": {
    const state = readState(name);
    const daemons = daemonStatus(name);
    process.stdout.write(`${JSON.stringify({ state: state ?? null, daemons }, null, 2)}\n`);
    if (!state || daemons.some((d) => !d.running && d.pid !== undefined)) process.exitCode = 1;
    break;
  }
  default:
    process.stderr.write(`unknown command "${command}"; use up, down or status\n`);
    process.exitCode = 2;
}

// Command line for the local control plane:
//   node infra/local/cli.ts up [--name N] [--foreground]   start (and with --foreground, stop on Ctrl-C)
//   node infra/local/cli.ts down [--name N]                stop and clean up
//   node infra/local/cli.ts status [--name N]              what runs, where the kubeconfig is
import { parseArgs } from "node:util";
import { cleanupInstance, daemonStatus, readState, startLocalCluster } from "./control-plane.ts";
import { DEFAULT_INSTANCE } from "./layout.ts";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    name: { type: "string", default: DEFAULT_INSTANCE },
    foreground: { type: "boolean", default: false },
  },
});
const command = positionals[0] ?? "status";
const name = values.name;
const log = (line: string) => process.stderr.write(`[local ${name}] ${line}\n`);

function printUsage(kubeconfigPath: string): void {
  process.stdout.write(
    [
      "",
      "Local control plane is up.",
      `  export KUBECONFIG=${kubeconfigPath}`,
      "  kubectl get nodes",
      "  kubectl get pods -A -o wide",
      "",
    ].join("\n"),
  );
}

switch (command) {
  case "up": {
    const cluster = await startLocalCluster({ name, log });
    printUsage(cluster.kubeconfigPath);
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

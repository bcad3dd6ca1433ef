// Entry point of the process kubelet: `node infra/local/kubelet/main.ts <config.json>`.
// Started by the local control plane; stops its pods and exits on SIGTERM/SIGINT.
import { readFileSync } from "node:fs";
import { PooledKubeConfig } from "../../../shared/kube-config.ts";
import { createLogger } from "../../../shared/log.ts";
import { Kubelet, type KubeletConfig } from "./kubelet.ts";

interface FileConfig extends KubeletConfig {
  kubeconfigPath: string;
}

const configPath = process.argv[2];
if (!configPath) {
  process.stderr.write("usage: kubelet/main.ts <config.json>\n");
  process.exit(2);
}
const config = JSON.parse(readFileSync(configPath, "utf8")) as FileConfig;
const log = createLogger({ level: process.env.LOG_LEVEL ?? "info" }).child({ component: "kubelet" });
const kc = new PooledKubeConfig();
kc.loadFromFile(config.kubeconfigPath);
const kubelet = new Kubelet(kc, config, log);

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, "stopping pods");
  try {
    await kubelet.stop();
  } catch (error) {
    log.error({ err: error }, "stop failed");
  }
  process.exit(0);
}
process.on("SIGTERM", () => void shutdown("SIGTERM"));
process.on("SIGINT", () => void shutdown("SIGINT"));

try {
  await kubelet.start();
  log.info("kubelet running");
} catch (error) {
  log.fatal({ err: error }, "kubelet failed to start");
  process.exit(1);
}

// A real node's container runtime: Debian's containerd (1.6) with runc, one instance per node with
// its own root, state, socket and runc root, running in the node's network namespace so that the
// CNI bridge plugin builds the node's pod network there. Images come from OCI archives (nothing
// can be pulled here): `ctr images import` into the CRI's "k8s.io" namespace.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { isOurProcess, type PidRecord, startDaemon, waitUntil } from "../daemons.ts";
import type { RealNodeLayout } from "./layout.ts";

const run = promisify(execFile);
const CNI_BIN_DIR = "/usr/lib/cni";

function tomlString(value: string): string {
  return JSON.stringify(value);
}

/**
 * containerd's config (version 2, as 1.6 reads it). restrict_oom_score_adj: kubelet asks for
 * -998 for pause containers, which needs CAP_SYS_RESOURCE; where the host lacks it (as in a
 * container or a sandboxed VM) runc's create fails, so scores are kept no lower than containerd's.
 * netns_mounts_under_state_dir: pod network namespaces live in the node's directory, so a cleanup
 * after a crash finds them. enable_unprivileged_ports (containerd 2's default): a non-root
 * container may bind ports below 1024, as CoreDNS (user 65532) does on 53.
 */
export function containerdConfig(node: RealNodeLayout, sandboxImage: string): string {
  const cri = `plugins."io.containerd.grpc.v1.cri"`;
  return `version = 2
root = ${tomlString(join(node.dir, "containerd", "root"))}
state = ${tomlString(join(node.dir, "containerd", "state"))}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = ${tomlString(node.containerdSocket)}

[ttrpc]
  address = ${tomlString(join(node.dir, "containerd.ttrpc.sock"))}

[plugins."io.containerd.internal.v1.opt"]
  path = ${tomlString(join(node.dir, "containerd", "opt"))}

[${cri}]
  sandbox_image = ${tomlString(sandboxImage)}
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  [${cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [${cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [${cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = ${tomlString(join(node.dir, "runc"))}
  [${cri}.cni]
    bin_dir = ${tomlString(CNI_BIN_DIR)}
    conf_dir = ${tomlString(join(node.dir, "cni"))}
`;
}

/** The CNI network: a bridge in the node's namespace, the node's /27, the node as the pods' gateway. */
export function cniConfig(node: RealNodeLayout): string {
  return JSON.stringify(
    {
      cniVersion: "1.0.0",
      name: "eop",
      plugins: [
        {
          type: "bridge",
          bridge: "cni0",
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: "host-local",
            ranges: [[{ subnet: node.podCidr }]],
            routes: [{ dst: "0.0.0.0/0" }],
            dataDir: join(node.dir, "cni-ipam"),
          },
        },
        { type: "portmap", capabilities: { portMappings: true } },
      ],
    },
    null,
    2,
  );
}

export async function startContainerd(
  node: RealNodeLayout,
  sandboxImage: string,
  logFile: string,
  pidFile: string,
): Promise<PidRecord> {
  for (const plugin of ["bridge", "host-local", "loopback", "portmap"]) {
    if (!existsSync(join(CNI_BIN_DIR, plugin)))
      throw new Error(
        `the CNI plugin ${plugin} is missing in ${CNI_BIN_DIR} (apt-get install containernetworking-plugins)`,
      );
  }
  mkdirSync(join(node.dir, "cni"), { recursive: true });
  writeFileSync(join(node.dir, "cni", "10-eop.conflist"), cniConfig(node));
  const config = join(node.dir, "containerd.toml");
  writeFileSync(config, containerdConfig(node, sandboxImage));
  const record = startDaemon({
    name: `${node.name} containerd`,
    command: "/usr/bin/containerd",
    args: ["--config", config],
    env: { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin" },
    logFile,
    pidFile,
    netns: node.netns,
  });
  await waitUntil(async () => (await ctr(node, ["version"])).length > 0, {
    what: `${node.name} containerd`,
    timeoutMs: 30_000,
    intervalMs: 100,
    alive: () => isOurProcess(record),
    logFile,
  });
  return record;
}

async function ctr(node: RealNodeLayout, args: string[]): Promise<string> {
  const { stdout } = await run(
    "ctr",
    ["--address", node.containerdSocket, "--namespace", "k8s.io", ...args],
    {
      maxBuffer: 16 * 1024 * 1024,
    },
  );
  return stdout;
}

/** Loads OCI archives into the node's image store, as a registry pull would have. */
export async function importImages(node: RealNodeLayout, archives: string[]): Promise<void> {
  for (const archive of archives) {
    await ctr(node, ["images", "import", archive]).catch((error: unknown) => {
      const said = (error as { stderr?: string }).stderr?.trim();
      throw new Error(`${node.name}: importing ${archive} into containerd failed${said ? `: ${said}` : ""}`, {
        cause: error,
      });
    });
  }
}

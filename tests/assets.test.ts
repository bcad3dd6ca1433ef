// Builds (or finds) the local control plane's binaries and checks each one reports its pinned version,
// then that a second call is the warm path: no build, stamps untouched, well under a second.
import { execFile } from "node:child_process";
import { stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import t from "tap";
import {
  type Assets,
  ETCD_VERSIONS,
  ensureAssets,
  etcdForMinor,
  KUBERNETES_VERSION,
  newestEtcd,
} from "../infra/local/assets.ts";

const execFileAsync = promisify(execFile);

/** stdout and stderr together: some of these print their version on stderr. */
async function versionOf(binary: string, args: string[]): Promise<string> {
  const { stdout, stderr } = await execFileAsync(binary, args, { timeout: 30_000 });
  return `${stdout}${stderr}`;
}

function stampsOf(assets: Assets): string[] {
  return [dirname(assets.kubeApiserver), ...assets.etcd.map((e) => e.binDir)].map((dir) =>
    join(dir, ".complete"),
  );
}

async function mtimes(paths: string[]): Promise<number[]> {
  return Promise.all(paths.map(async (path) => (await stat(path)).mtimeMs));
}

// The first run may build everything from source: progress goes to the TAP output as comments.
const assets = await ensureAssets({ log: (line) => t.comment(line) });

t.test("kubernetes binaries report the pinned version", async (t) => {
  t.equal(assets.kubernetesVersion, KUBERNETES_VERSION);
  t.match(await versionOf(assets.kubeApiserver, ["--version"]), `Kubernetes v${KUBERNETES_VERSION}`);
  t.match(await versionOf(assets.kubeControllerManager, ["--version"]), `Kubernetes v${KUBERNETES_VERSION}`);
  t.match(await versionOf(assets.kubectl, ["version", "--client"]), `Client Version: v${KUBERNETES_VERSION}`);
});

t.test("each etcd build reports its pinned version", async (t) => {
  t.same(
    assets.etcd.map((e) => e.version),
    ETCD_VERSIONS,
  );
  for (const build of assets.etcd) {
    t.equal(build.minor, build.version.split(".").slice(0, 2).join("."));
    t.match(await versionOf(build.etcd, ["--version"]), `etcd Version: ${build.version}`);
    t.match(await versionOf(build.etcdctl, ["version"]), `etcdctl version: ${build.version}`);
    t.match(await versionOf(build.etcdutl, ["version"]), `etcdutl version: ${build.version}`);
  }
});

t.test("etcd lookup helpers", async (t) => {
  for (const version of ETCD_VERSIONS) {
    t.equal(etcdForMinor(assets, version.split(".").slice(0, 2).join(".")).version, version);
  }
  t.throws(() => etcdForMinor(assets, "2.3"), /no etcd 2\.3/);
  t.equal(newestEtcd(assets).version, "3.7.3");
});

t.test("a second call is the warm path", async (t) => {
  const stamps = stampsOf(assets);
  const before = await mtimes(stamps);
  const lines: string[] = [];
  const started = performance.now();
  const again = await ensureAssets({ log: (line) => lines.push(line) });
  const elapsed = performance.now() - started;
  t.same(again, assets);
  t.equal(lines.length, 1, "one short line");
  t.notMatch(lines.join("\n"), /building/);
  t.ok(elapsed < 1000, `returned in ${elapsed.toFixed(0)} ms`);
  t.same(await mtimes(stamps), before, "stamps untouched");
});

// The local Kubernetes control plane: etcd for storage, kube-apiserver (own CA, admin client
// certificate, service-account keys, RBAC on) and kube-controller-manager, started the way
// controller-runtime's envtest starts them, plus Redis and the process kubelet. Used by tests
// (`await startLocalCluster()`), by the demo, and by `infra/local/cli.ts up|down|status`.
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { request } from "node:https";
import { basename, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import {
  type CertificateAuthority,
  createCertificateAuthority,
  createKeyPair,
  issueCertificate,
  type KeyAndCert,
} from "../../shared/pki.ts";
import { projectBuildah } from "../image/buildah.ts";
import { buildClusterImages, corednsImage, pauseImage } from "../image/cluster-images.ts";
import { type Assets, cacheRoot, ensureAssets } from "./assets.ts";
import {
  freePort,
  freePortOn,
  isOurProcess,
  type PidRecord,
  readPidFile,
  startDaemon,
  stopDaemon,
  stopDaemonFromPidFile,
  waitUntil,
} from "./daemons.ts";
import { deleteBridge, deletePodNetwork, ensureBridge, listNetns } from "./kubelet/sandbox.ts";
import { DEFAULT_INSTANCE, type InstanceLayout, instanceLayout, SERVICE_CIDR } from "./layout.ts";
import {
  cleanupRealNodes,
  loseRealNode,
  type RealNodesOptions,
  replaceRealNode,
  startRealNodes,
} from "./nodes/real-nodes.ts";
import {
  CREDENTIALS_FILE,
  OBJECT_STORE_STOP_GRACE_MS,
  type ObjectStore,
  startObjectStore,
} from "./object-store.ts";
import { startRedis } from "./redis.ts";

export const NODE_NAME = "local-node";

export interface LocalClusterOptions {
  name?: string;
  /** Start Redis too (BullMQ needs it). Default true. */
  redis?: boolean;
  /** Start the process kubelet. Default true (false when real nodes are asked for). */
  kubelet?: boolean;
  /**
   * Run this many real nodes instead (containerd, kubelet, kube-proxy, CoreDNS; see nodes/):
   * kube-apiserver then listens on the bridge gateway, where nodes and pods reach it.
   */
  realNodes?: number;
  /** More OCI image archives for every real node (e.g. the operator's image). */
  nodeImages?: string[];
  /**
   * Start a real S3-compatible object store (versitygw) on the bridge gateway, reachable from the host
   * and from pods. Default false.
   */
  objectStore?: boolean;
  log?: (line: string) => void;
}

export interface LocalClusterState {
  name: string;
  kubeconfigPath: string;
  apiserverUrl: string;
  redisUrl?: string;
  /** Where the object store listens; its secret key is in `credentialsFile` (0600), never in here. */
  objectStore?: { endpoint: string; region: string; accessKeyId: string; credentialsFile: string };
  nodeName: string;
  /** Names of the real nodes, when started with them. */
  realNodes?: string[];
  dir: string;
  network: InstanceLayout["network"];
  kubernetesVersion: string;
  etcdVersions: string[];
  startedAt: string;
}

export interface LocalCluster extends LocalClusterState {
  /** The object store with its credentials, when started with `objectStore: true`. */
  s3?: ObjectStore;
  /** Stops every process, removes namespaces, mounts, the bridge and the instance's files. */
  stop(): Promise<void>;
  /** Stops kube-apiserver, keeps it down for `downMs`, and starts it again on the same port. */
  restartApiserver(downMs?: number): Promise<void>;
  /** Stops Redis and starts it again on the same port (its append-only file keeps the data). */
  restartRedis(downMs?: number): Promise<void>;
  /** Loses a real node as a machine is lost (see nodes/real-nodes.ts loseRealNode). */
  loseNode(name: string): Promise<void>;
  /** A lost real node's machine replaced by a new one of the same name (see replaceRealNode). */
  replaceNode(name: string): Promise<void>;
}

const DAEMONS = [
  "kubelet",
  "kube-scheduler",
  "kube-controller-manager",
  "kube-apiserver",
  "object-store",
  "redis",
  "etcd",
] as const;

function pidFile(layout: InstanceLayout, name: string): string {
  return join(layout.dir, `${name}.pid`);
}

function logFile(layout: InstanceLayout, name: string): string {
  return join(layout.logDir, `${name}.log`);
}

function objectStoreDir(layout: InstanceLayout): string {
  return join(layout.dir, "object-store");
}

interface Pki {
  ca: CertificateAuthority;
  apiserver: KeyAndCert;
  admin: KeyAndCert;
  /** What kube-apiserver presents to kubelets (logs, exec, port-forward). */
  kubeletClient: KeyAndCert;
  serviceAccount: { privateKey: string; publicKey: string };
  files: Record<
    | "caCert"
    | "caKey"
    | "apiserverCert"
    | "apiserverKey"
    | "saKey"
    | "saPub"
    | "kubeletClientCert"
    | "kubeletClientKey",
    string
  >;
}

async function createPki(layout: InstanceLayout): Promise<Pki> {
  const ca = await createCertificateAuthority(`etcd-operator-local-${layout.name}-ca`);
  const apiserver = await issueCertificate(ca, {
    commonName: "kube-apiserver",
    usage: ["server"],
    dnsNames: [
      "localhost",
      "kubernetes",
      "kubernetes.default",
      "kubernetes.default.svc",
      "kubernetes.default.svc.cluster.local",
    ],
    ipAddresses: ["127.0.0.1", "10.96.0.1", layout.network.gateway],
  });
  const admin = await issueCertificate(ca, {
    commonName: "local-admin",
    organizations: ["system:masters"],
    usage: ["client"],
  });
  const kubeletClient = await issueCertificate(ca, {
    commonName: "kube-apiserver-kubelet-client",
    organizations: ["system:masters"],
    usage: ["client"],
  });
  const serviceAccount = await createKeyPair();
  const dir = layout.pkiDir;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const files = {
    caCert: join(dir, "ca.crt"),
    caKey: join(dir, "ca.key"),
    apiserverCert: join(dir, "apiserver.crt"),
    apiserverKey: join(dir, "apiserver.key"),
    saKey: join(dir, "sa.key"),
    saPub: join(dir, "sa.pub"),
    kubeletClientCert: join(dir, "kubelet-client.crt"),
    kubeletClientKey: join(dir, "kubelet-client.key"),
  };
  writeFileSync(files.caCert, ca.cert);
  writeFileSync(files.caKey, ca.key, { mode: 0o600 });
  writeFileSync(files.apiserverCert, apiserver.cert);
  writeFileSync(files.apiserverKey, apiserver.key, { mode: 0o600 });
  writeFileSync(files.saKey, serviceAccount.privateKey, { mode: 0o600 });
  writeFileSync(files.saPub, serviceAccount.publicKey);
  writeFileSync(files.kubeletClientCert, kubeletClient.cert);
  writeFileSync(files.kubeletClientKey, kubeletClient.key, { mode: 0o600 });
  return { ca, apiserver, admin, kubeletClient, serviceAccount, files };
}

function kubeconfigYaml(server: string, pki: Pki, name: string): string {
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  const context = `etcd-operator-local-${name}`;
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: context, cluster: { server, "certificate-authority-data": b64(pki.ca.cert) } }],
    users: [
      {
        name: "local-admin",
        user: { "client-certificate-data": b64(pki.admin.cert), "client-key-data": b64(pki.admin.key) },
      },
    ],
    contexts: [{ name: context, context: { cluster: context, user: "local-admin", namespace: "default" } }],
    "current-context": context,
  });
}

interface TlsClient {
  ca?: string;
  cert?: string;
  key?: string;
  insecure?: boolean;
}

/** GET over HTTPS; resolves with the status code and body (never rejects on HTTP errors). */
export function httpsGet(
  url: string,
  tls: TlsClient,
  timeoutMs = 2_000,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: "GET",
        ca: tls.ca,
        cert: tls.cert,
        key: tls.key,
        rejectUnauthorized: !tls.insecure,
        timeout: timeoutMs,
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          body += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("timeout", () => req.destroy(new Error(`timeout after ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end();
  });
}

async function httpOk(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
  return res.ok;
}

function pathEnv(): Record<string, string> {
  return { PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin", HOME: process.env.HOME ?? "/root" };
}

/** The pid files one folder below the instance's: servers started beside the control plane. */
function extraPidFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .flatMap((folder) => {
      const path = join(dir, folder.name);
      return readdirSync(path)
        .filter((name) => name.endsWith(".pid"))
        .map((name) => join(path, name));
    });
}

/**
 * Removes whatever an earlier run of this instance left behind: processes from pid files, pod
 * network namespaces, the bridge and the instance's directory. Safe to call when nothing is there.
 */
export async function cleanupInstance(name: string, log: (line: string) => void = () => {}): Promise<void> {
  const layout = instanceLayout(name);
  if (existsSync(layout.dir)) {
    for (const daemon of DAEMONS) {
      const record = readPidFile(pidFile(layout, daemon));
      if (record && isOurProcess(record)) {
        log(`stopping ${daemon} (pid ${record.pid})`);
        await stopDaemon(record, stopGraceMs(daemon));
      }
    }
    // Servers a test started in a folder of the instance (Azurite, fake-gcs-server) go with it.
    for (const pid of extraPidFiles(layout.dir)) {
      const record = readPidFile(pid);
      if (record && isOurProcess(record)) {
        log(`stopping ${record.name} (pid ${record.pid})`);
        await stopDaemon(record, 5_000);
      }
    }
  }
  await cleanupRealNodes(layout, log);
  for (const netns of await listNetns(layout.network.netnsPrefix)) {
    log(`removing leftover network namespace ${netns}`);
    const suffix = netns.slice(layout.network.netnsPrefix.length);
    await deletePodNetwork(netns, `${layout.network.vethPrefix}${suffix}`);
  }
  await deleteBridge(layout.network.bridge);
  // Pod containers were started detached; any that outlived the kubelet hold the pod netns,
  // which deletePodNetwork killed above. Mounts live in their own mount namespaces and die with them.
  rmSync(layout.dir, { recursive: true, force: true });
}

/**
 * With ETCD_OPERATOR_KEEP_LOGS=<dir>, an instance's logs (its daemons', the operator processes' and
 * the pods' containers') are copied to <dir>/<instance> before the instance's directory goes: what a
 * failed end-to-end test needs for its post-mortem. Data directories are not copied.
 */
function keepLogs(layout: InstanceLayout, log: (line: string) => void): void {
  const keep = process.env.ETCD_OPERATOR_KEEP_LOGS;
  if (!keep || !existsSync(layout.dir)) return;
  const to = join(keep, layout.name);
  rmSync(to, { recursive: true, force: true });
  // Logs and configuration only: not the real nodes' image stores, container root file systems
  // (device nodes) or kubelet volumes (secrets).
  const nodes = `${layout.dir}/nodes/`;
  cpSync(layout.dir, to, {
    recursive: true,
    filter: (source) => {
      const stat = lstatSync(source);
      if (!stat.isDirectory() && !stat.isFile()) return false;
      if (source === layout.etcdDataDir || source.endsWith("/data")) return false;
      return !(source.startsWith(nodes) && ["containerd", "runc", "kubelet"].includes(basename(source)));
    },
  });
  log(`logs kept in ${to}`);
}

function stopGraceMs(daemon: (typeof DAEMONS)[number]): number {
  if (daemon === "kubelet") return 30_000;
  if (daemon === "object-store") return OBJECT_STORE_STOP_GRACE_MS;
  return 10_000;
}

/** The live process that started this instance, if any. */
function ownerOf(layout: InstanceLayout): number | undefined {
  try {
    const pid = Number(readFileSync(join(layout.dir, "owner.pid"), "utf8"));
    if (!Number.isInteger(pid) || pid <= 0) return undefined;
    process.kill(pid, 0);
    return pid;
  } catch {
    return undefined;
  }
}

export function readState(name = DEFAULT_INSTANCE): LocalClusterState | undefined {
  const layout = instanceLayout(name);
  if (!existsSync(layout.statePath)) return undefined;
  return JSON.parse(readFileSync(layout.statePath, "utf8")) as LocalClusterState;
}

export function daemonStatus(name = DEFAULT_INSTANCE): { name: string; pid?: number; running: boolean }[] {
  const layout = instanceLayout(name);
  return DAEMONS.map((daemon) => {
    const record = readPidFile(pidFile(layout, daemon));
    return { name: daemon, pid: record?.pid, running: record ? isOurProcess(record) : false };
  });
}

export function listInstances(): string[] {
  try {
    return readdirSync(join(instanceLayout(DEFAULT_INSTANCE).dir, ".."));
  } catch {
    return [];
  }
}

async function startStorageEtcd(
  layout: InstanceLayout,
  assets: Assets,
): Promise<{ url: string; record: PidRecord }> {
  const build = assets.etcd.find((e) => e.minor === "3.6") ?? assets.etcd[assets.etcd.length - 1];
  if (!build) throw new Error("no etcd build available for the control plane's storage");
  const clientPort = await freePort();
  const peerPort = await freePort();
  const url = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const log = logFile(layout, "etcd");
  const record = startDaemon({
    name: "etcd",
    command: build.etcd,
    args: [
      "--name=storage",
      `--data-dir=${layout.etcdDataDir}`,
      `--listen-client-urls=${url}`,
      `--advertise-client-urls=${url}`,
      `--listen-peer-urls=${peer}`,
      `--initial-advertise-peer-urls=${peer}`,
      `--initial-cluster=storage=${peer}`,
      // A throwaway store for a local cluster: skipping fsync keeps the apiserver fast on slow disks.
      "--unsafe-no-fsync",
      "--log-level=warn",
    ],
    env: pathEnv(),
    logFile: log,
    pidFile: pidFile(layout, "etcd"),
  });
  await waitUntil(() => httpOk(`${url}/health`), {
    what: "etcd (control-plane storage)",
    timeoutMs: 30_000,
    alive: () => isOurProcess(record),
    logFile: log,
  });
  return { url, record };
}

/**
 * With real nodes kube-apiserver listens on the bridge gateway instead of loopback (kubelets and
 * pods reach it there; the `kubernetes` Service's endpoint is kept by the lease reconciler), and
 * reaches kubelets by their InternalIP with its own client certificate.
 */
async function startApiserver(
  layout: InstanceLayout,
  assets: Assets,
  pki: Pki,
  etcdUrl: string,
  realNodes: boolean,
  fixedPort?: number,
): Promise<{ url: string; record: PidRecord }> {
  const host = realNodes ? layout.network.gateway : "127.0.0.1";
  const port = fixedPort ?? (await freePortOn(host));
  const url = `https://${host}:${port}`;
  const log = logFile(layout, "kube-apiserver");
  const record = startDaemon({
    name: "kube-apiserver",
    command: assets.kubeApiserver,
    args: [
      `--etcd-servers=${etcdUrl}`,
      `--etcd-prefix=/registry`,
      `--cert-dir=${layout.pkiDir}`,
      `--tls-cert-file=${pki.files.apiserverCert}`,
      `--tls-private-key-file=${pki.files.apiserverKey}`,
      `--client-ca-file=${pki.files.caCert}`,
      `--secure-port=${port}`,
      `--bind-address=${host}`,
      `--advertise-address=${host}`,
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      `--service-account-key-file=${pki.files.saPub}`,
      `--service-account-signing-key-file=${pki.files.saKey}`,
      "--authorization-mode=Node,RBAC",
      "--allow-privileged=true",
      "--profiling=false",
      ...(realNodes
        ? [
            "--endpoint-reconciler-type=lease",
            "--kubelet-preferred-address-types=InternalIP",
            `--kubelet-client-certificate=${pki.files.kubeletClientCert}`,
            `--kubelet-client-key=${pki.files.kubeletClientKey}`,
          ]
        : ["--endpoint-reconciler-type=none"]),
      "--v=1",
    ],
    env: pathEnv(),
    logFile: log,
    pidFile: pidFile(layout, "kube-apiserver"),
  });
  const tls = { ca: pki.ca.cert, cert: pki.admin.cert, key: pki.admin.key };
  await waitUntil(async () => (await httpsGet(`${url}/readyz`, tls)).status === 200, {
    what: "kube-apiserver",
    timeoutMs: 90_000,
    intervalMs: 250,
    alive: () => isOurProcess(record),
    logFile: log,
  });
  return { url, record };
}

async function startControllerManager(layout: InstanceLayout, assets: Assets, pki: Pki): Promise<PidRecord> {
  const certDir = join(layout.dir, "kcm");
  mkdirSync(certDir, { recursive: true });
  return startComponent(layout, "kube-controller-manager", assets.kubeControllerManager, [
    `--cert-dir=${certDir}`,
    "--controllers=*",
    `--service-account-private-key-file=${pki.files.saKey}`,
    `--root-ca-file=${pki.files.caCert}`,
    `--cluster-signing-cert-file=${pki.files.caCert}`,
    `--cluster-signing-key-file=${pki.files.caKey}`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    // The process kubelet runs pods itself; there is no cloud and no node IPAM here.
    "--allocate-node-cidrs=false",
    "--profiling=false",
  ]);
}

/** Real nodes need the scheduler (the process kubelet takes its pods itself). */
function startScheduler(layout: InstanceLayout, assets: Assets): Promise<PidRecord> {
  return startComponent(layout, "kube-scheduler", assets.node.kubeScheduler, []);
}

/**
 * A control-plane component beside kube-apiserver (controller manager, scheduler): the admin
 * kubeconfig, its secure port on loopback, no leader election; resolves once /healthz answers.
 */
async function startComponent(
  layout: InstanceLayout,
  name: (typeof DAEMONS)[number],
  command: string,
  args: string[],
): Promise<PidRecord> {
  const port = await freePort();
  const log = logFile(layout, name);
  const record = startDaemon({
    name,
    command,
    args: [
      `--kubeconfig=${layout.kubeconfigPath}`,
      `--authentication-kubeconfig=${layout.kubeconfigPath}`,
      `--authorization-kubeconfig=${layout.kubeconfigPath}`,
      `--secure-port=${port}`,
      "--bind-address=127.0.0.1",
      "--leader-elect=false",
      ...args,
      "--v=1",
    ],
    env: pathEnv(),
    logFile: log,
    pidFile: pidFile(layout, name),
  });
  await waitUntil(
    async () => (await httpsGet(`https://127.0.0.1:${port}/healthz`, { insecure: true })).status === 200,
    { what: name, timeoutMs: 60_000, intervalMs: 250, alive: () => isOurProcess(record), logFile: log },
  );
  return record;
}

async function startKubelet(
  layout: InstanceLayout,
  assets: Assets,
  pki: Pki,
  apiserverUrl: string,
): Promise<PidRecord> {
  mkdirSync(layout.kubeletDir, { recursive: true });
  const configPath = join(layout.kubeletDir, "config.json");
  const config = {
    nodeName: NODE_NAME,
    kubeconfigPath: layout.kubeconfigPath,
    stateDir: layout.kubeletDir,
    network: layout.network,
    etcd: assets.etcd,
    kubernetesVersion: assets.kubernetesVersion,
  };
  writeFileSync(configPath, JSON.stringify(config, null, 2));
  const log = logFile(layout, "kubelet");
  const main = new URL("./kubelet/main.ts", import.meta.url).pathname;
  const record = startDaemon({
    name: "kubelet",
    command: process.execPath,
    args: [main, configPath],
    env: { ...pathEnv(), NODE_OPTIONS: "" },
    logFile: log,
    pidFile: pidFile(layout, "kubelet"),
  });
  const tls = { ca: pki.ca.cert, cert: pki.admin.cert, key: pki.admin.key };
  await waitUntil(
    async () => {
      const res = await httpsGet(`${apiserverUrl}/api/v1/nodes/${NODE_NAME}`, tls);
      if (res.status !== 200) return false;
      const node = JSON.parse(res.body) as { status?: { conditions?: { type: string; status: string }[] } };
      return node.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
    },
    {
      what: "process kubelet (node Ready)",
      timeoutMs: 30_000,
      intervalMs: 200,
      alive: () => isOurProcess(record),
      logFile: log,
    },
  );
  return record;
}

/**
 * Pods can only be created once kube-controller-manager has made the namespace's "default"
 * ServiceAccount (the ServiceAccount admission plugin requires it) and published the
 * kube-root-ca.crt ConfigMap that every pod's projected token volume reads.
 */
async function waitForNamespaceDefaults(apiserverUrl: string, pki: Pki): Promise<void> {
  const tls = { ca: pki.ca.cert, cert: pki.admin.cert, key: pki.admin.key };
  for (const path of ["serviceaccounts/default", "configmaps/kube-root-ca.crt"]) {
    await waitUntil(
      async () => (await httpsGet(`${apiserverUrl}/api/v1/namespaces/default/${path}`, tls)).status === 200,
      {
        what: `namespace default: ${path}`,
        timeoutMs: 60_000,
        intervalMs: 200,
      },
    );
  }
}

function timed<T>(log: (line: string) => void, what: string, work: () => Promise<T>): Promise<T> {
  const started = Date.now();
  log(`starting ${what}`);
  return work().then((result) => {
    log(`${what} ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return result;
  });
}

export async function startLocalCluster(options: LocalClusterOptions = {}): Promise<LocalCluster> {
  const name = options.name ?? DEFAULT_INSTANCE;
  const log = options.log ?? ((line: string) => process.stderr.write(`[local ${name}] ${line}\n`));
  const layout = instanceLayout(name);
  // versitygw is only built for a cluster that runs the object store.
  const realNodes = options.realNodes ?? 0;
  // versitygw and the real nodes' binaries are only built for an instance that runs them.
  const assets = await ensureAssets({
    log,
    only: [
      "kubernetes",
      "etcd",
      // Real nodes also get an image of the S3 store, to run it as a pod.
      ...(options.objectStore || realNodes > 0 ? (["versitygw"] as const) : []),
      ...(realNodes > 0 ? (["node", "coredns"] as const) : []),
    ],
  });

  // Two live owners of one instance would tear down each other's cluster: refuse clearly.
  const owner = ownerOf(layout);
  if (owner !== undefined && owner !== process.pid) {
    throw new Error(
      `local cluster "${name}" is in use by process ${owner}; stop it first (npm run local -- down --name ${name})`,
    );
  }
  // Whatever an earlier run left (a crash, a killed test) goes first.
  await cleanupInstance(name, log);
  mkdirSync(layout.logDir, { recursive: true });
  writeFileSync(join(layout.dir, "owner.pid"), String(process.pid));
  mkdirSync(layout.etcdDataDir, { recursive: true, mode: 0o700 });

  const stop = async () => {
    log("stopping");
    keepLogs(layout, log);
    await cleanupInstance(name, log);
    log("stopped");
  };

  let s3Starting: Promise<ObjectStore> | undefined;
  try {
    const pki = await createPki(layout);
    await ensureBridge(layout.network);
    // On the bridge gateway, so pods reach it from their network namespaces as the host does. It
    // starts while the rest of the cluster does (it takes ~0.1 s).
    if (options.objectStore) {
      s3Starting = timed(log, "object store (versitygw S3)", () =>
        startObjectStore({
          dir: objectStoreDir(layout),
          host: layout.network.gateway,
          binary: assets.versitygw.versitygw,
          logFile: logFile(layout, "object-store"),
          pidFile: pidFile(layout, "object-store"),
          log,
        }),
      );
      // Awaited below; until then a failure must not count as an unhandled rejection.
      s3Starting.catch(() => {});
    }
    const etcd = await timed(log, "etcd (storage)", () => startStorageEtcd(layout, assets));
    const apiserver = await timed(log, "kube-apiserver", () =>
      startApiserver(layout, assets, pki, etcd.url, realNodes > 0),
    );
    writeFileSync(layout.kubeconfigPath, kubeconfigYaml(apiserver.url, pki, name), { mode: 0o600 });
    await timed(log, "kube-controller-manager", () => startControllerManager(layout, assets, pki));
    await timed(log, "default service account and root CA bundle", () =>
      waitForNamespaceDefaults(apiserver.url, pki),
    );
    let redisUrl: string | undefined;
    const redisOptions = {
      dir: join(layout.dir, "redis"),
      logFile: logFile(layout, "redis"),
      pidFile: pidFile(layout, "redis"),
    };
    let redisPort: number | undefined;
    if (options.redis ?? true) {
      const redis = await timed(log, "redis", () => startRedis(redisOptions));
      redisUrl = redis.url;
      redisPort = redis.port;
    }
    let nodeNames: string[] | undefined;
    let nodeOptions: RealNodesOptions | undefined;
    if (realNodes > 0) {
      await timed(log, "kube-scheduler", () => startScheduler(layout, assets));
      const images = await timed(log, "node images", async () =>
        buildClusterImages(
          await projectBuildah(cacheRoot()),
          { etcd: assets.etcd, node: assets.node, coredns: assets.coredns, versitygw: assets.versitygw },
          log,
        ),
      );
      nodeOptions = {
        instance: layout,
        count: realNodes,
        assets,
        ca: pki.ca,
        caFile: pki.files.caCert,
        apiserverUrl: apiserver.url,
        kubeconfigPath: layout.kubeconfigPath,
        images: [...images.map((i) => i.archive), ...(options.nodeImages ?? [])],
        sandboxImage: pauseImage(assets.node),
        corednsImage: corednsImage(assets.coredns),
        log,
      };
      const started = nodeOptions;
      const nodes = await timed(log, `${realNodes} real node(s)`, () => startRealNodes(started));
      nodeNames = nodes.map((n) => n.name);
    } else if (options.kubelet ?? true) {
      await timed(log, "process kubelet", () => startKubelet(layout, assets, pki, apiserver.url));
    }
    const s3 = await s3Starting;
    const state: LocalClusterState = {
      name,
      kubeconfigPath: layout.kubeconfigPath,
      apiserverUrl: apiserver.url,
      redisUrl,
      objectStore: s3 && {
        endpoint: s3.endpoint,
        region: s3.region,
        accessKeyId: s3.accessKeyId,
        credentialsFile: join(objectStoreDir(layout), CREDENTIALS_FILE),
      },
      nodeName: NODE_NAME,
      realNodes: nodeNames,
      dir: layout.dir,
      network: layout.network,
      kubernetesVersion: assets.kubernetesVersion,
      etcdVersions: assets.etcd.map((e) => e.version),
      startedAt: new Date().toISOString(),
    };
    writeFileSync(layout.statePath, JSON.stringify(state, null, 2));
    const apiserverPort = Number(new URL(apiserver.url).port);
    const restartApiserver = async (downMs = 0) => {
      await stopDaemonFromPidFile(pidFile(layout, "kube-apiserver"));
      log(`kube-apiserver stopped; restarting in ${downMs} ms`);
      await sleep(downMs);
      await startApiserver(layout, assets, pki, etcd.url, realNodes > 0, apiserverPort);
      log("kube-apiserver restarted");
    };
    const restartRedis = async (downMs = 0) => {
      if (redisPort === undefined) throw new Error(`local cluster "${name}" runs without Redis`);
      await stopDaemonFromPidFile(pidFile(layout, "redis"));
      await sleep(downMs);
      await startRedis({ ...redisOptions, port: redisPort });
      log("redis restarted");
    };
    const loseNode = (node: string) => loseRealNode(layout, node);
    const replaceNode = async (node: string) => {
      if (!nodeOptions) throw new Error(`local cluster "${name}" runs without real nodes`);
      await replaceRealNode(nodeOptions, node);
    };
    return { ...state, s3, stop, restartApiserver, restartRedis, loseNode, replaceNode };
  } catch (error) {
    // Leave the logs for the error message, but no processes or namespaces.
    const reason = error instanceof Error ? error.message : String(error);
    log(`start failed: ${reason}`);
    await stop().catch(() => {});
    // A store still starting either fails now that its process is stopped, or was spawned after the
    // cleanup: wait for it to settle and stop what it started.
    await s3Starting?.then(
      (store) => store.stop(),
      () => {},
    );
    throw new Error(`local cluster "${name}" did not start`, { cause: error });
  }
}

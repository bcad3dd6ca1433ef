// The etcd member client against real etcd processes of every built minor (no fakes): one-, two- and
// three-member clusters and a TLS member on 127.0.0.1 with free ports and temporary data directories,
// started directly (no kubelet). Short heartbeat and election timeouts keep elections fast.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import t from "tap";
import { type EtcdBuild, ensureAssets, newestEtcd } from "../infra/local/assets.ts";
import { freePort, tailFile, waitUntil } from "../infra/local/daemons.ts";
import {
  addLearner,
  addVoter,
  type EndpointStatus,
  type EtcdTLS,
  endpointHealth,
  endpointStatuses,
  initialCluster,
  leaderId,
  listMembers,
  type MemberInfo,
  memberIdFromHex,
  memberIdHex,
  moveLeader,
  promoteLearner,
  removeMember,
} from "../shared/etcd-members.ts";
import { createCertificateAuthority, issueCertificate } from "../shared/pki.ts";

const execFileAsync = promisify(execFile);
const ENV = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
const START_TIMEOUT_MS = 15_000;

const assets = await ensureAssets({ only: ["etcd"], log: (line) => t.comment(line) });
const root = mkdtempSync(join(tmpdir(), "eop-etcd-members-"));
const running = new Set<ChildProcess>();
t.teardown(() => {
  // SIGKILL also ends a SIGSTOPped process.
  for (const child of running) child.kill("SIGKILL");
  rmSync(root, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------------
// Running etcd

/** Where a member listens: known before it starts, since --initial-cluster names every peer URL. */
interface Slot {
  name: string;
  clientURL: string;
  peerURL: string;
}

interface Member extends Slot {
  build: EtcdBuild;
  child: ChildProcess;
  logFile: string;
  exited: Promise<void>;
}

interface ServerTLS {
  certFile: string;
  keyFile: string;
  caFile: string;
}

const usedPorts = new Set<number>();

/** A free port not handed out before in this run (the kernel may offer a just-closed one again). */
async function uniquePort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (!usedPorts.has(port)) {
      usedPorts.add(port);
      return port;
    }
  }
}

async function slot(name: string, scheme = "http"): Promise<Slot> {
  const clientPort = await uniquePort();
  const peerPort = await uniquePort();
  return {
    name,
    clientURL: `${scheme}://127.0.0.1:${clientPort}`,
    peerURL: `http://127.0.0.1:${peerPort}`,
  };
}

function startMember(
  build: EtcdBuild,
  at: Slot,
  cluster: string,
  state: "new" | "existing",
  tls?: ServerTLS,
): Member {
  const dir = mkdtempSync(join(root, `${build.minor}-${at.name}-`));
  const logFile = join(dir, "etcd.log");
  const args = [
    `--name=${at.name}`,
    `--data-dir=${join(dir, "data")}`,
    `--listen-client-urls=${at.clientURL}`,
    `--advertise-client-urls=${at.clientURL}`,
    `--listen-peer-urls=${at.peerURL}`,
    `--initial-advertise-peer-urls=${at.peerURL}`,
    `--initial-cluster=${cluster}`,
    `--initial-cluster-state=${state}`,
    "--heartbeat-interval=50",
    "--election-timeout=500",
  ];
  if (tls) {
    args.push(
      `--cert-file=${tls.certFile}`,
      `--key-file=${tls.keyFile}`,
      `--trusted-ca-file=${tls.caFile}`,
      "--client-cert-auth",
    );
  }
  const out = openSync(logFile, "a");
  const child = spawn(build.etcd, args, { env: ENV, stdio: ["ignore", out, out] });
  closeSync(out);
  running.add(child);
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => {
      running.delete(child);
      resolve();
    });
  });
  return { ...at, build, child, logFile, exited };
}

function isRunning(member: Member): boolean {
  return member.child.exitCode === null && member.child.signalCode === null;
}

async function httpJson(url: string): Promise<unknown> {
  const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
  return response.ok ? response.json() : undefined;
}

/** Waits until the member serves clients (etcd serves /version once it has joined). */
async function waitServing(member: Member): Promise<void> {
  await waitUntil(async () => (await httpJson(`${member.clientURL}/version`)) !== undefined, {
    what: `etcd ${member.build.version} ${member.name}`,
    timeoutMs: START_TIMEOUT_MS,
    alive: () => isRunning(member),
    logFile: member.logFile,
  });
}

/** Waits until the member's /health passes: it has a leader and the cluster has a quorum. */
async function waitHealthy(member: Member): Promise<void> {
  await waitUntil(
    async () => {
      const body = await httpJson(`${member.clientURL}/health`);
      return typeof body === "object" && body !== null && "health" in body && body.health === "true";
    },
    {
      what: `etcd ${member.build.version} ${member.name} healthy`,
      timeoutMs: START_TIMEOUT_MS,
      alive: () => isRunning(member),
      logFile: member.logFile,
    },
  );
}

function clusterFlag(slots: readonly Slot[]): string {
  return slots.map((s) => `${s.name}=${s.peerURL}`).join(",");
}

async function startCluster(build: EtcdBuild, size: number, prefix: string): Promise<Member[]> {
  const slots: Slot[] = [];
  for (let i = 0; i < size; i++) slots.push(await slot(`${prefix}${i}`));
  const members = slots.map((s) => startMember(build, s, clusterFlag(slots), "new"));
  await Promise.all(members.map(waitServing));
  await Promise.all(members.map(waitHealthy));
  return members;
}

function endpointsOf(members: readonly Member[]): string[] {
  return members.map((m) => m.clientURL);
}

async function kill(member: Member): Promise<void> {
  member.child.kill("SIGKILL");
  await member.exited;
}

/** The member ID each endpoint reports, by client URL. */
async function idsByEndpoint(members: readonly Member[]): Promise<Map<string, string>> {
  const statuses = await endpointStatuses(endpointsOf(members));
  return new Map(statuses.map((s) => [s.endpoint, s.memberId ?? ""]));
}

/**
 * Whether every thread of the process is stopped. SIGSTOP takes effect only once one of its threads
 * is scheduled and starts the group stop: on a loaded machine a running thread of etcd could still
 * answer a request sent right after kill().
 */
function allThreadsStopped(pid: number): boolean {
  const threads = readdirSync(`/proc/${pid}/task`);
  // The state is the field after the command's closing parenthesis.
  return threads.every((tid) => {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    return /^[tT]/.test(stat.slice(stat.lastIndexOf(")") + 2));
  });
}

function statusOf(statuses: readonly EndpointStatus[], member: Member): EndpointStatus | undefined {
  return statuses.find((s) => s.endpoint === member.clientURL);
}

/**
 * Runs a membership change, retrying while etcd refuses it as "unhealthy cluster": etcd's strict
 * reconfiguration check wants a quorum of voters connected for 5 s, which a just-started cluster
 * has not been. Any other error fails at once.
 */
async function whenClusterSettled<T>(what: string, change: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      return await change();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (!message.includes("unhealthy cluster") || Date.now() > deadline) {
        throw new Error(`${what} failed`, { cause: error });
      }
      await sleep(200);
    }
  }
}

function timed<T>(work: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const start = Date.now();
  return work().then((value) => ({ value, ms: Date.now() - start }));
}

// ---------------------------------------------------------------------------------------------------
// Tests

t.test("member ID helpers and argument checks work without a cluster", async (t) => {
  t.equal(memberIdHex("10276657743932975437"), "8e9e05c52164694d", "the ID of etcd's default member");
  t.equal(memberIdFromHex("8e9e05c52164694d"), "10276657743932975437");
  t.equal(memberIdFromHex("0x8e9e05c52164694d"), "10276657743932975437");
  t.equal(memberIdHex("18446744073709551615"), "ffffffffffffffff", "uint64 max keeps every digit");
  for (const bad of ["", "0", "-1", "12a", "18446744073709551616", "1.5"]) {
    t.throws(() => memberIdHex(bad), /invalid etcd member ID/, `"${bad}" is rejected`);
  }
  t.throws(() => memberIdFromHex("xyz"), /invalid etcd member ID/);
  await t.rejects(listMembers([]), /no etcd endpoints given/);
  await t.rejects(removeMember(["http://127.0.0.1:1"], "12x"), /invalid etcd member ID/);
  await t.rejects(addLearner(["http://127.0.0.1:1"], "not a url"), /invalid etcd peer URL/);

  const statuses: EndpointStatus[] = [
    { endpoint: "a", ok: true, memberId: "1", leaderId: "1", raftTerm: "4" },
    { endpoint: "b", ok: true, memberId: "2", leaderId: "2", raftTerm: "5" },
    { endpoint: "c", ok: true, memberId: "3", leaderId: "0", raftTerm: "6" },
    { endpoint: "d", ok: false, error: "down" },
  ];
  t.equal(
    leaderId(statuses),
    "2",
    "the leader of the newest term wins; members without a leader do not count",
  );
  t.equal(leaderId([{ endpoint: "d", ok: false, error: "down" }]), undefined);

  const members: MemberInfo[] = [
    { id: "1", name: "a", peerURLs: ["http://a:2380"], clientURLs: ["http://a:2379"], isLearner: false },
    { id: "2", name: "", peerURLs: ["http://b:2380"], clientURLs: [], isLearner: true },
  ];
  t.equal(initialCluster(members, { id: "2", name: "b" }), "a=http://a:2380,b=http://b:2380");
});

t.test("endpoints that are down or misconfigured come back as ok: false, never as a throw", async (t) => {
  const port = await uniquePort(); // nothing listens here
  const badTLS: EtcdTLS = { ca: "x", cert: "y" };
  const [refused, misconfigured] = await Promise.all([
    endpointStatuses([`http://127.0.0.1:${port}`]),
    endpointStatuses([`http://127.0.0.1:${port}`], { tls: badTLS }),
  ]);
  t.equal(refused[0]?.ok, false);
  t.match(refused[0]?.error, /ECONNREFUSED|UNAVAILABLE/);
  t.equal(misconfigured[0]?.ok, false);
  t.match(misconfigured[0]?.error, /both a client cert and key/);
  const health = await endpointHealth(`http://127.0.0.1:${port}`);
  t.equal(health.healthy, false);
  await t.rejects(listMembers([`http://127.0.0.1:${port}`]), /no etcd endpoint answered/);
});

// Started now so that etcd's 5 s strict-reconfiguration window has passed by the time the live
// removal test below runs, instead of that test waiting for it.
const settledClusters = new Map<string, Promise<Member[]>>(
  assets.etcd.map((build) => [build.version, startCluster(build, 3, "s")]),
);
// A rejection is reported by the test that awaits it; this only keeps it from counting as unhandled.
for (const cluster of settledClusters.values()) cluster.catch(() => undefined);

for (const build of assets.etcd) {
  t.test(`etcd ${build.version}`, async (t) => {
    t.test("a one-member cluster lists itself, reports its status and is healthy", async (t) => {
      const [member] = await startCluster(build, 1, "m");
      if (!member) throw new Error("no member started");
      const members = await listMembers([member.clientURL]);
      t.equal(members.length, 1);
      const self = members[0];
      t.match(self, {
        id: /^[0-9]+$/,
        name: "m0",
        peerURLs: [member.peerURL],
        clientURLs: [member.clientURL],
        isLearner: false,
      });
      const id = self?.id ?? "";

      const statuses = await endpointStatuses([member.clientURL]);
      t.match(statuses, [
        {
          endpoint: member.clientURL,
          ok: true,
          memberId: id,
          leaderId: id,
          version: build.version,
          isLearner: false,
        },
      ]);
      t.same(statuses[0]?.errors, []);
      t.ok((statuses[0]?.dbSize ?? 0) > 0, "dbSize is a number of bytes");
      t.equal(leaderId(statuses), id);
      t.match(await endpointHealth(member.clientURL), { healthy: true, memberId: id, isLearner: false });

      // etcdctl prints IDs in hex: the same member, the same digits.
      const { stdout } = await execFileAsync(
        build.etcdctl,
        [`--endpoints=${member.clientURL}`, "member", "list"],
        { env: ENV, timeout: 10_000 },
      );
      t.equal(stdout.split(",")[0]?.trim(), memberIdHex(id));
      t.equal(memberIdFromHex(memberIdHex(id)), id);
    });

    t.test("a learner joins a one-member cluster and is promoted once it has caught up", async (t) => {
      const [first] = await startCluster(build, 1, "m");
      if (!first) throw new Error("no member started");
      const endpoints = [first.clientURL];
      const next = await slot("m1");

      const added = await addLearner(endpoints, next.peerURL);
      t.equal(added.existed, false);
      t.match(added.member, {
        id: /^[0-9]+$/,
        name: "",
        peerURLs: [next.peerURL],
        clientURLs: [],
        isLearner: true,
      });
      t.equal(added.members.length, 2);
      t.ok(
        added.members.some((m) => m.id === added.member.id),
        "the returned list includes the new member",
      );
      const learnerId = added.member.id;

      const again = await addLearner(endpoints, next.peerURL);
      t.equal(again.existed, true, "a repeated add finds the member an earlier attempt added");
      t.equal(again.member.id, learnerId);
      t.equal(again.members.length, 2, "and nothing was added twice");

      t.same(
        await promoteLearner(endpoints, learnerId),
        { promoted: false, reason: "not-caught-up" },
        "a learner whose process is not running is not caught up, which is no error",
      );

      const cluster = initialCluster(added.members, { id: learnerId, name: next.name });
      t.same(cluster.split(",").sort(), [`m0=${first.peerURL}`, `m1=${next.peerURL}`].sort());
      const learner = startMember(build, next, cluster, "existing");
      await waitServing(learner);

      const [learnerStatus] = await endpointStatuses([learner.clientURL]);
      t.match(learnerStatus, { ok: true, memberId: learnerId, isLearner: true });
      await waitUntil(async () => (await endpointHealth(learner.clientURL)).healthy, {
        what: "learner healthy",
        timeoutMs: 10_000,
      });
      t.match(await endpointHealth(learner.clientURL), { healthy: true, isLearner: true });
      // A learner serves no membership RPCs: reads and writes given its endpoint first go on to the
      // next one.
      const learnerFirst = [learner.clientURL, first.clientURL];
      t.equal((await listMembers(learnerFirst)).length, 2, "the member list comes from the voter");
      t.equal((await listMembers(learnerFirst, { serializable: true })).length, 2);
      t.match(await addLearner(learnerFirst, next.peerURL), { existed: true, member: { id: learnerId } });

      let result = await promoteLearner(learnerFirst, learnerId);
      const deadline = Date.now() + 15_000;
      while (!result.promoted && result.reason === "not-caught-up" && Date.now() < deadline) {
        await sleep(100);
        result = await promoteLearner(learnerFirst, learnerId);
      }
      t.same(result, { promoted: true });

      const after = await listMembers([learner.clientURL, first.clientURL]);
      t.same(after.map((m) => [m.name, m.isLearner]).sort(), [
        ["m0", false],
        ["m1", false],
      ]);
      t.same(await promoteLearner(endpoints, learnerId), { promoted: false, reason: "not-learner" });
      t.same(await promoteLearner(endpoints, "12345"), { promoted: false, reason: "not-found" });
      await waitHealthy(learner);
      t.match(await endpointHealth(learner.clientURL), { healthy: true, isLearner: false });
    });

    t.test(
      "in a three-member cluster leadership moves, and hung or dead members are reported and skipped",
      async (t) => {
        const members = await startCluster(build, 3, "m");
        const endpoints = endpointsOf(members);
        const ids = await idsByEndpoint(members);
        const idOf = (m: Member): string => ids.get(m.clientURL) ?? "";

        const before = await endpointStatuses(endpoints);
        t.ok(
          before.every((s) => s.ok),
          "every member answers",
        );
        const leader = leaderId(before);
        const follower = members.find((m) => idOf(m) !== leader);
        if (leader === undefined || !follower) throw new Error("no leader and follower");

        t.same(await moveLeader(endpoints, idOf(follower)), { fromId: leader, moved: true });
        t.equal(leaderId(await endpointStatuses(endpoints)), idOf(follower), "the follower leads now");
        t.same(
          await moveLeader(endpoints, idOf(follower)),
          { fromId: idOf(follower), moved: false },
          "moving leadership to the leader sends nothing",
        );

        // A hung member (stopped, so its port still accepts connections but nothing answers) costs the
        // deadline and no more.
        const victim = members.find((m) => m !== follower);
        if (!victim) throw new Error("no second follower");
        const others = members.filter((m) => m !== victim);
        victim.child.kill("SIGSTOP");
        try {
          const pid = victim.child.pid;
          if (pid === undefined) throw new Error("the victim has no pid");
          await waitUntil(async () => allThreadsStopped(pid), {
            what: "the stopped member's threads",
            timeoutMs: 5_000,
            intervalMs: 10,
          });
          const hung = await timed(() => endpointStatuses(endpoints, { timeoutMs: 500 }));
          t.ok(hung.ms < 1_500, `statuses came back in ${hung.ms} ms with a 500 ms deadline`);
          t.match(statusOf(hung.value, victim), { ok: false, error: /DEADLINE_EXCEEDED|Deadline exceeded/ });
          for (const other of others) t.match(statusOf(hung.value, other), { ok: true });
          const listed = await timed(() =>
            listMembers([victim.clientURL, ...endpointsOf(others)], { timeoutMs: 500 }),
          );
          t.equal(listed.value.length, 3, "the member list comes from the next endpoint");
          t.ok(listed.ms < 1_500, `listMembers past a hung first endpoint took ${listed.ms} ms`);
        } finally {
          victim.child.kill("SIGCONT");
        }

        await kill(victim);
        const dead = await timed(() => endpointStatuses(endpoints));
        t.ok(dead.ms < 3_000, `statuses with a dead member came back in ${dead.ms} ms`);
        t.match(statusOf(dead.value, victim), { ok: false, error: /UNAVAILABLE|ECONNREFUSED/ });
        for (const other of others) t.match(statusOf(dead.value, other), { ok: true });
        t.match(await endpointHealth(victim.clientURL), { healthy: false });
        t.equal((await listMembers([victim.clientURL, ...endpointsOf(others)])).length, 3);

        // A dead member can be removed at once (etcd's quorum check does not count it as active).
        t.same(
          await whenClusterSettled("removing the dead member", () => removeMember(endpoints, idOf(victim))),
          { removed: true },
        );
        t.same(
          await removeMember(endpoints, idOf(victim)),
          { removed: false },
          "removing it again is a success",
        );
        const left = await listMembers(endpoints);
        t.same(left.map((m) => m.id).sort(), others.map(idOf).sort());
        t.same(await promoteLearner(endpoints, idOf(victim)), { promoted: false, reason: "not-found" });

        // Without a quorum a linearizable list cannot answer, a serializable one can, and an add of a
        // peer URL that is already there still finds it (it is looked up before MemberAdd, which
        // would be refused for the missing quorum first).
        const [survivor, lost] = others;
        if (!survivor || !lost) throw new Error("two members should be left");
        await kill(lost);
        await t.rejects(listMembers([survivor.clientURL], { timeoutMs: 300 }), /no etcd endpoint answered/);
        t.equal((await listMembers([survivor.clientURL], { serializable: true })).length, 2);
        t.match(await addVoter([survivor.clientURL], lost.peerURL, { timeoutMs: 300 }), {
          existed: true,
          member: { id: idOf(lost), isLearner: false },
        });
      },
    );

    t.test(
      "a live follower is removed (again: still a success) and a voter is added in its place",
      async (t) => {
        const cluster = settledClusters.get(build.version);
        if (!cluster) throw new Error("no settled cluster");
        const members = await cluster;
        const ids = await idsByEndpoint(members);
        const leader = leaderId(await endpointStatuses(endpointsOf(members)));
        const follower = members.find((m) => ids.get(m.clientURL) !== leader);
        const followerId = follower ? ids.get(follower.clientURL) : undefined;
        if (!follower || !followerId) throw new Error("no follower");
        // The removed member's own endpoint first: the removal must still go through another member.
        const endpoints = [follower.clientURL, ...endpointsOf(members.filter((m) => m !== follower))];

        t.same(
          await whenClusterSettled("removing a live follower", () => removeMember(endpoints, followerId)),
          { removed: true },
        );
        t.same(
          await removeMember(endpoints, followerId),
          { removed: false },
          "removing it again is a success",
        );
        const rest = members.filter((m) => m !== follower);
        t.equal((await listMembers(endpointsOf(rest))).length, 2);
        t.equal(leaderId(await endpointStatuses(endpointsOf(rest))), leader, "the leader stayed");
        // A removed member learns it was removed and shuts itself down.
        const exited = await Promise.race([
          follower.exited.then(() => true),
          sleep(10_000, false, { ref: false }),
        ]);
        t.ok(exited, `the removed member's process exited\n${exited ? "" : tailFile(follower.logFile)}`);

        // A plain voter (no learner step): two of three voters run, so the cluster keeps its quorum
        // while the new process starts.
        const next = await slot("s3");
        const added = await whenClusterSettled("adding a voter", () =>
          addVoter(endpointsOf(rest), next.peerURL),
        );
        t.match(added, { existed: false, member: { isLearner: false, name: "", peerURLs: [next.peerURL] } });
        t.match(await addVoter(endpointsOf(rest), next.peerURL), {
          existed: true,
          member: { id: added.member.id },
        });
        const voter = startMember(
          build,
          next,
          initialCluster(added.members, { id: added.member.id, name: "s3" }),
          "existing",
        );
        await waitServing(voter);
        await waitHealthy(voter);
        const after = await listMembers([voter.clientURL]);
        const expected = [...rest.map((m) => m.name), "s3"].map((name) => [name, false]);
        t.same(after.map((m) => [m.name, m.isLearner]).sort(), expected.sort());
      },
    );
  });
}

t.test("TLS: client certificates, and serverName when the certificates carry DNS names only", async (t) => {
  const build = newestEtcd(assets);
  const dir = join(root, "tls");
  mkdirSync(dir);
  const ca = await createCertificateAuthority("etcd-members-test-ca");
  const serverName = "m0.example.default.svc";
  const server = await issueCertificate(ca, {
    commonName: serverName,
    dnsNames: [serverName],
    usage: ["server"],
  });
  const client = await issueCertificate(ca, { commonName: "operator", usage: ["client"] });
  const files: ServerTLS = {
    certFile: join(dir, "server.crt"),
    keyFile: join(dir, "server.key"),
    caFile: join(dir, "ca.crt"),
  };
  writeFileSync(files.certFile, server.cert);
  writeFileSync(files.keyFile, server.key);
  writeFileSync(files.caFile, ca.cert);

  const at = await slot("m0", "https");
  const member = startMember(build, at, clusterFlag([at]), "new", files);
  const tls: EtcdTLS = { ca: ca.cert, cert: client.cert, key: client.key, serverName };
  await waitUntil(async () => (await endpointHealth(at.clientURL, { tls })).healthy, {
    what: "etcd with TLS healthy",
    timeoutMs: START_TIMEOUT_MS,
    alive: () => isRunning(member),
    logFile: member.logFile,
  });

  t.match(await listMembers([at.clientURL], { tls }), [{ name: "m0", clientURLs: [at.clientURL] }]);
  t.match(await endpointStatuses([at.clientURL], { tls }), [{ ok: true, version: build.version }]);

  const [noServerName] = await endpointStatuses([at.clientURL], { tls: { ...tls, serverName: undefined } });
  t.equal(noServerName?.ok, false, "without serverName the certificate does not match 127.0.0.1");
  const [noClientCert] = await endpointStatuses([at.clientURL], { tls: { ca: ca.cert, serverName } });
  t.equal(noClientCert?.ok, false, "--client-cert-auth turns away a client without a certificate");
  const [plain] = await endpointStatuses([at.clientURL]);
  t.equal(plain?.ok, false, "an https endpoint without TLS options does not trust the private CA");
});

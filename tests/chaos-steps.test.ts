// Chaos, step by step: the one worker is SIGKILLed the moment it starts each kind of step that
// tests/chaos.test.ts does not already kill it at (that one covers seed, add-, promote- and
// remove-member and ensure-services), a fresh worker is started, and the cluster must converge
// within a bound while every write a quorum writer got acknowledged reads back linearizably.
// After each case the test checks that the killed step's work is done (the claim gone, every
// member upgraded, …) and says whether the next worker had to start the step again.
//
// Cluster "steps" (members on PersistentVolumeClaims, under a writer throughout):
//   restart-member      a member pod deleted: it comes back on its volume, same name and member ID
//   delete-claim        scaled 3 → 2: remove-member, then the removed member's claim goes
//   create-member-pod   a learner added to etcd by hand with the peer URL the operator gives a new
//                       member (the cluster paused meanwhile): the operator creates its pod
//   delete-pod          a stray pod with the cluster's member labels that is no member
//   drain-old-log, upgrade-member, move-leader   3.6 → 3.7, the leader upgraded last
//   enable-downgrade    3.7 → 3.6 with the allow-downgrade annotation
// Cluster "q" (emptyDir members: a deleted pod takes its data with it):
//   recover-from-member, create-recovery-seed, finish-recovery   two of three members deleted
//   all-members-lost, then the EtcdRestore it creates in phases Verifying, Staging, Replacing, Seeding:
//                       every member deleted a moment after a backup
// Where quorum is lost the loss is bounded and reported: nothing up to the revision the operator
// says it recovered to (an Event) is missing, nothing up to the backup's revision after a restore.
// The two clusters' cases run side by side, each cluster in its own namespace with its own operator
// (watcher, scheduler, one worker) on its own Redis database, so a kill in one never touches the
// other: most of each case is waiting for a killed worker's lease and job lock to lapse.
import { setTimeout as sleep } from "node:timers/promises";
import t, { type Test } from "tap";
import { waitFor } from "../infra/local/kube-wait.ts";
import {
  ALLOW_DOWNGRADE_ANNOTATION,
  GROUP,
  OLD_LOG_DRAINED_ANNOTATION,
  PLURAL,
  RECOVERY_ANNOTATION,
  RESTORE_ANNOTATION,
  VERSION,
} from "../shared/api/etcd-cluster.ts";
import { validateEtcdClusterSpec } from "../shared/api/validate-etcd-cluster.ts";
import { endpointStatuses, listMembers } from "../shared/etcd-members.ts";
import { minorOf, newestPatchOf } from "../shared/etcd-versions.ts";
import { MERGE_PATCH } from "../shared/kube.ts";
import { memberClaimName, newMemberName } from "../shared/member-pods.ts";
import { memberPeerURL } from "../shared/member-tls.ts";
import {
  awsSecretData,
  createBackup,
  createSecret,
  eventsOf,
  startClusterWithStore,
  waitBackupOutcome,
} from "./helpers/backups.ts";
import {
  CHAOS_OPERATOR_ENV,
  endpointsOf,
  type Fault,
  type KillPoint,
  killOutcomes,
  killWorkerAt,
  livePods,
  type OperatorRoles,
  pointStarted,
  replaceWorker,
  runRound,
  startOperatorRoles,
  type Target,
  waitConverged,
} from "./helpers/chaos.ts";
import { createCluster, etcdClient, getCluster, patchSpec } from "./helpers/clusters.ts";
import type { OperatorProcess } from "./helpers/operator-processes.ts";
import { chooser, seedFrom } from "./helpers/random.ts";
import { missingWrites, startWriter, type Writer, type WriterResult } from "./helpers/writer.ts";

const SEED = seedFrom(process.env.CHAOS_SEED);
t.comment(`CHAOS_SEED=${SEED} (set it to replay this run's choice of victims)`);
const V36 = newestPatchOf("3.6") ?? "";
const V37 = newestPatchOf("3.7") ?? "";
/** A member-level step killed once: lease and job-lock expiry (~15 s), then the step and catching up. */
const BOUND_MS = 120_000;
/** The upgrade: the old log drained (twice if killed mid-way) and three members, with three kills. */
const UPGRADE_BOUND_MS = 240_000;
/** Two of three members lost: three kills, the seed streams the survivor's snapshot, two members added. */
const QUORUM_BOUND_MS = 240_000;
/**
 * The restore: five kills, four of them of a restore job (its job lock is 30 s, checked every 15 s),
 * every member restored from the backup at once.
 */
const RESTORE_BOUND_MS = 420_000;

const {
  local,
  store,
  clients: c,
} = await startClusterWithStore({ name: "e2e-chaossteps", bucket: "backups" }, (stop) => t.teardown(stop));
const { core } = c;
await core.createNamespace({ body: { metadata: { name: "quorum" } } });
await createSecret(c, "quorum", "aws", awsSecretData(store));
const storeEndpoint = store.endpoint;

/** An operator of its own for `namespace`: watcher, scheduler and one worker, queues in Redis database `db`. */
function operatorFor(namespace: string, db: number): OperatorRoles {
  const roles = startOperatorRoles(local, {
    ...CHAOS_OPERATOR_ENV,
    // The operator image restores and recovery seeds run their init containers from (this checkout).
    OPERATOR_IMAGE: "localhost/etcd-operator:dev",
    MY_POD_NAMESPACE: namespace,
    REDIS_URL: `${local.redisUrl}/${db}`,
  });
  t.teardown(() => roles.stopAll());
  return roles;
}

const steps: Target = {
  local,
  c,
  namespace: "default",
  name: "steps",
  size: 3,
  operator: operatorFor("default", 0),
  rand: chooser(SEED),
};
const q: Target = {
  local,
  c,
  namespace: "quorum",
  name: "q",
  size: 3,
  operator: operatorFor("quorum", 1),
  rand: chooser(SEED + 1),
};

type Kill = { point: KillPoint; next: OperatorProcess };

interface CaseResult {
  steps: string;
  detail: string;
  outcomes: string;
  convergeMs: number;
  boundMs: number;
  writesChecked: number;
  lost?: number;
}
const results: CaseResult[] = [];

/** The versions the members report themselves (etcd's Status), sorted; "down" for one that does not answer. */
async function runningVersions(target: Target): Promise<string[]> {
  const statuses = await endpointStatuses(await endpointsOf(target), { timeoutMs: 2_000 });
  return statuses.map((s) => (s.ok ? (s.version ?? "?") : "down")).sort();
}

/** etcd's cluster version, as a member answers it on /version. */
async function clusterVersion(target: Target): Promise<string> {
  const [endpoint] = await endpointsOf(target);
  const answer = (await (await fetch(`${endpoint}/version`)).json()) as { etcdcluster?: string };
  return answer.etcdcluster ?? "";
}

/** "" once every member runs `version` and the status says so; else what is not there yet. */
function allOn(target: Target, version: string): () => Promise<string> {
  return async () => {
    const versions = await runningVersions(target);
    if (versions.length !== target.size || versions.some((v) => v !== version))
      return `members run ${versions.join(", ")}, not all ${version}`;
    const status = (await getCluster(c, target.namespace, target.name)).status;
    if (status?.currentVersion !== version || status.targetVersion)
      return `status: current ${status?.currentVersion}, target ${status?.targetVersion}`;
    return "";
  };
}

async function events(target: Target): Promise<{ type?: string; reason?: string; message?: string }[]> {
  return eventsOf(c, target.namespace, "EtcdCluster", target.name);
}

async function count(target: Target, reason: string): Promise<number> {
  return (await events(target)).filter((e) => e.reason === reason).length;
}

async function claimNames(target: Target): Promise<string[]> {
  const claims = await core.listNamespacedPersistentVolumeClaim({
    namespace: target.namespace,
    labelSelector: `etcd_cluster=${target.name}`,
  });
  return claims.items
    .filter((x) => !x.metadata?.deletionTimestamp)
    .map((x) => x.metadata?.name ?? "")
    .sort();
}

async function podNames(target: Target): Promise<string[]> {
  return (await livePods(target)).map((p) => p.metadata?.name ?? "").sort();
}

/**
 * One case on a cluster under `writer`: kill the worker at each of `points` (see killWorkerAt) after
 * `trigger`, then converge within `boundMs` (with `also`), and every acknowledged write reads back.
 */
async function killCase(
  t: Test,
  target: Target,
  writer: Writer,
  points: KillPoint[],
  trigger: () => Promise<string>,
  boundMs: number,
  also?: () => Promise<string>,
  extraKills?: (target: Target) => Promise<Kill[]>,
): Promise<void> {
  const fault: Fault = async (tg) => {
    const report = await killWorkerAt(tg, points, trigger, boundMs);
    const more = extraKills ? await extraKills(tg) : [];
    return more.length > 0
      ? {
          ...report,
          detail: `${report.detail}, ${more.map((k) => k.point).join(", ")}`,
          kills: [...(report.kills ?? []), ...more],
        }
      : report;
  };
  const result = await runRound(target, writer, fault, boundMs, also);
  results.push({
    steps: result.kind.replace(/^kill-worker-at-/, ""),
    detail: result.detail,
    outcomes: result.outcomes ?? "",
    convergeMs: result.convergeMs,
    boundMs,
    writesChecked: result.writesChecked,
  });
  t.comment(
    `${result.detail}: converged in ${result.convergeMs} ms; longest time without an acknowledged write ${result.longestWriteGapMs} ms`,
  );
  t.comment(`after the kills: ${result.outcomes}`);
  t.ok(result.convergeMs <= boundMs, `converged in ${result.convergeMs} ms (bound ${boundMs} ms)`);
  t.ok(result.writesChecked > 0, `${result.writesChecked} acknowledged writes so far`);
  t.same(
    result.missing.map((w) => w.key),
    [],
    `every one of the ${result.writesChecked} acknowledged writes reads back`,
  );
}

// The leader is upgraded last, after leadership moved to an upgraded member. Should leadership
// change hands by itself during the upgrade (an election under load), the old leader is a follower
// by its turn and no move is needed; the downgrade then gives move-leader its second chance.
let moveLeaderKills = 0;
async function killAtMoveLeaderIfAny(target: Target, version: string): Promise<Kill[]> {
  if (moveLeaderKills > 0) return [];
  const worker = target.operator.workers[0];
  if (!worker) throw new Error("no worker");
  const stop = new AbortController();
  const moved = pointStarted(worker, "move-leader", UPGRADE_BOUND_MS, stop.signal).then(
    () => true,
    () => false,
  );
  const finished = (async () => {
    while (!stop.signal.aborted) {
      const versions = await runningVersions(target).catch(() => []);
      if (versions.length === target.size && versions.every((v) => v === version)) return false;
      await sleep(500);
    }
    return false;
  })();
  const atMoveLeader = await Promise.race([moved, finished]);
  stop.abort();
  if (!atMoveLeader) return [];
  const next = await replaceWorker(target);
  moveLeaderKills++;
  return [{ point: "move-leader", next }];
}

let stepsWriter: Writer | undefined;
const stepsWrites = (): Writer => {
  if (!stepsWriter) throw new Error("cluster steps was never created");
  return stepsWriter;
};

async function stepsFlow(t: Test): Promise<void> {
  await t.test("cluster steps (members on volumes) is created, a writer starts", async (t) => {
    const started = Date.now();
    await createCluster(c, steps.namespace, "steps", {
      size: 3,
      version: V36,
      pod: { persistentVolumeClaimSpec: { resources: { requests: { storage: "1Gi" } } } },
    });
    const ms = await waitConverged(steps, started, BOUND_MS);
    t.pass(`Available in ${ms} ms`);
    stepsWriter = startWriter(() => endpointsOf(steps), "steps/");
  });

  await t.test(
    "restart-member: a member pod lost, the worker SIGKILLed as it restarts it on its volume",
    async (t) => {
      const pods = await livePods(steps);
      const victim = steps.rand.pick(
        pods.sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? "")),
      );
      const name = victim.metadata?.name ?? "";
      const client = await etcdClient(c, steps.namespace, "steps");
      const idsBefore = (await client.cluster.memberList({ linearizable: true })).members
        .map((m) => m.ID)
        .sort();
      client.close();
      const replacedBefore = await count(steps, "MemberReplaced");
      await killCase(
        t,
        steps,
        stepsWrites(),
        ["restart-member"],
        async () => {
          await core.deleteNamespacedPod({ namespace: steps.namespace, name, gracePeriodSeconds: 0 });
          return `member pod ${name} deleted`;
        },
        BOUND_MS,
      );
      const back = (await livePods(steps)).find((p) => p.metadata?.name === name);
      t.ok(back && back.metadata?.uid !== victim.metadata?.uid, `${name} runs again in a new pod`);
      t.ok(
        back?.spec?.volumes?.some((v) => v.persistentVolumeClaim?.claimName === memberClaimName(name)),
        "on its own claim",
      );
      const after = await etcdClient(c, steps.namespace, "steps");
      t.same(
        (await after.cluster.memberList({ linearizable: true })).members.map((m) => m.ID).sort(),
        idsBefore,
        "the same member IDs: it came back as itself",
      );
      after.close();
      t.equal(await count(steps, "MemberReplaced"), replacedBefore, "no member was replaced");
    },
  );

  await t.test(
    "delete-claim: scaled 3 → 2, the worker SIGKILLed as it deletes the removed member's claim",
    async (t) => {
      const before = await podNames(steps);
      steps.size = 2;
      await killCase(
        t,
        steps,
        stepsWrites(),
        ["delete-claim"],
        async () => {
          await patchSpec(c, steps.namespace, "steps", { size: 2 });
          return "spec.size 3 → 2";
        },
        BOUND_MS,
      );
      const after = await podNames(steps);
      const removed = before.filter((n) => !after.includes(n));
      t.equal(removed.length, 1, `one member removed (${removed.join()})`);
      t.same(
        await claimNames(steps),
        after.map(memberClaimName).sort(),
        "claims are exactly the members' own",
      );
    },
  );

  await t.test(
    "create-member-pod: a member added to etcd without a pod, the worker SIGKILLed as it creates it",
    async (t) => {
      const cluster = await getCluster(c, steps.namespace, "steps");
      const validation = validateEtcdClusterSpec({ ...cluster.spec, size: 3 });
      if (!validation.ok) throw new Error(validation.problems.join("; "));
      const name = newMemberName("steps");
      const url = memberPeerURL(validation.spec, name, "steps", steps.namespace);
      steps.size = 3;
      await killCase(
        t,
        steps,
        stepsWrites(),
        ["create-member-pod"],
        async () => {
          // Paused while the member is added, so the operator's own add (size 2 → 3) cannot race it.
          await patchSpec(c, steps.namespace, "steps", { paused: true, size: 3 });
          await waitFor(
            "the operator to see steps paused",
            async () =>
              (await getCluster(c, steps.namespace, "steps")).status?.controlPaused ? true : undefined,
            { timeoutMs: 30_000, intervalMs: 200 },
          );
          // etcd refuses a member add for a few seconds after a membership change ("unhealthy cluster").
          await waitFor(
            `etcd to add learner ${name}`,
            async () => {
              const client = await etcdClient(c, steps.namespace, "steps");
              try {
                await client.cluster.memberAdd({ peerURLs: [url], isLearner: true });
                return true;
              } catch (error) {
                // An earlier try that got through (its answer lost) leaves the learner there.
                return /Peer URLs already exists/.test(String(error)) ? true : undefined;
              } finally {
                client.close();
              }
            },
            { timeoutMs: 30_000, intervalMs: 1_000 },
          );
          await patchSpec(c, steps.namespace, "steps", { paused: false });
          return `learner ${name} added to etcd by hand (${url}), no pod`;
        },
        BOUND_MS,
      );
      const members = await listMembers(await endpointsOf(steps));
      const added = members.find((m) => m.name === name);
      t.ok(added && !added.isLearner, `${name} started and is a voting member`);
      t.ok((await podNames(steps)).includes(name), `${name} has its pod`);
      t.ok((await claimNames(steps)).includes(memberClaimName(name)), "and its claim");
    },
  );

  await t.test(
    "delete-pod: a stray pod with the member labels, the worker SIGKILLed as it deletes it",
    async (t) => {
      const [member] = await livePods(steps);
      const stray = "steps-stray";
      let uid = "";
      await killCase(
        t,
        steps,
        stepsWrites(),
        ["delete-pod"],
        async () => {
          // The member labels (the operator's selector), but no etcd member: a sleeping shell.
          const created = await core.createNamespacedPod({
            namespace: steps.namespace,
            body: {
              metadata: { name: stray, labels: { ...member?.metadata?.labels } },
              spec: {
                terminationGracePeriodSeconds: 0,
                containers: [{ name: "etcd", image: "busybox:1.36", command: ["sleep", "3600"] }],
              },
            },
          });
          uid = created.metadata?.uid ?? "";
          return `pod ${stray} created with the labels of ${member?.metadata?.name}`;
        },
        BOUND_MS,
      );
      const pods = await core.listNamespacedPod({
        namespace: steps.namespace,
        labelSelector: `etcd_cluster=${steps.name}`,
      });
      t.notOk(
        pods.items.some((p) => p.metadata?.uid === uid),
        `${stray} is gone`,
      );
    },
  );

  await t.test(
    `drain-old-log, upgrade-member, move-leader: ${V36} → ${V37}, the worker SIGKILLed at each`,
    async (t) => {
      const upgradedBefore = await count(steps, "MemberUpgraded");
      await killCase(
        t,
        steps,
        stepsWrites(),
        ["drain-old-log", "upgrade-member"],
        async () => {
          await patchSpec(c, steps.namespace, "steps", { version: V37 });
          return `spec.version ${V36} → ${V37}`;
        },
        UPGRADE_BOUND_MS,
        allOn(steps, V37),
        (target) => killAtMoveLeaderIfAny(target, V37),
      );
      // Checked first, as soon as the status says the upgrade is done: before that was so, a
      // downgrade asked for now saw the old cluster version and skipped etcd's downgrade enable.
      const version = await clusterVersion(steps);
      t.equal(
        minorOf(version),
        "3.7",
        `etcd's cluster version is ${version} once the upgrade is reported done`,
      );
      t.same(await runningVersions(steps), [V37, V37, V37], "every member runs the new version");
      t.equal(
        (await getCluster(c, steps.namespace, "steps")).metadata?.annotations?.[OLD_LOG_DRAINED_ANNOTATION],
        "true",
        "the pre-3.6 log was drained (the cluster is marked so)",
      );
      // Announced before each image change, so no kill can lose one.
      t.ok((await count(steps, "MemberUpgraded")) >= upgradedBefore + 3, "a MemberUpgraded Event per member");
      t.comment(`killed at move-leader during the upgrade: ${moveLeaderKills > 0}`);
    },
  );

  await t.test(
    `enable-downgrade: ${V37} → ${V36} allowed, the worker SIGKILLed as it enables it`,
    async (t) => {
      await killCase(
        t,
        steps,
        stepsWrites(),
        ["enable-downgrade"],
        async () => {
          await c.custom.patchNamespacedCustomObject(
            {
              group: GROUP,
              version: VERSION,
              namespace: steps.namespace,
              plural: PLURAL,
              name: "steps",
              body: {
                metadata: { annotations: { [ALLOW_DOWNGRADE_ANNOTATION]: "true" } },
                spec: { version: V36 },
              },
            },
            MERGE_PATCH,
          );
          return `spec.version ${V37} → ${V36}, downgrade allowed`;
        },
        UPGRADE_BOUND_MS,
        allOn(steps, V36),
        (target) => killAtMoveLeaderIfAny(target, V36),
      );
      t.same(await runningVersions(steps), [V36, V36, V36], "every member runs the older version");
      // A member on 3.6 cannot run while etcd's cluster version is 3.7: the downgrade was enabled.
      const version = await clusterVersion(steps);
      t.equal(minorOf(version), "3.6", `etcd's cluster version is ${version}`);
      t.ok(moveLeaderKills > 0, "the worker was SIGKILLed at move-leader (in the upgrade or the downgrade)");
      // The fixed enable-downgrade: a look before the leader lowered the cluster version (or the
      // retry after a kill that landed after the enable) waits instead of failing the step.
      const failed = (await events(steps)).filter((e) => e.reason === "StepFailed").map((e) => e.message);
      t.same(
        failed.filter((m) => m?.startsWith("enable-downgrade")),
        [],
        "enable-downgrade never failed",
      );
      t.comment(`StepFailed Events of cluster steps: ${failed.length === 0 ? "none" : failed.join(" | ")}`);
    },
  );

  await t.test("the writer on cluster steps kept writing, and everything reads back", async (t) => {
    const { acknowledged, attempted, longestGapMs } = await stepsWrites().stop();
    t.ok(acknowledged.length > 100, `${acknowledged.length} of ${attempted} writes acknowledged`);
    t.same(
      (await missingWrites(await endpointsOf(steps), acknowledged)).map((w) => w.key),
      [],
    );
    t.comment(`longest time without an acknowledged write: ${longestGapMs} ms`);
  });
}

/** The revision an Event with `reason` names last ("… at revision N …"). */
async function revisionIn(target: Target, reason: string, pattern: RegExp): Promise<number> {
  const messages = (await events(target)).filter((e) => e.reason === reason).map((e) => e.message ?? "");
  const match = pattern.exec(messages.at(-1) ?? "");
  if (!match?.[1]) throw new Error(`no ${reason} Event naming a revision: ${messages.join(" | ")}`);
  return Number(match[1]);
}

async function deletePods(target: Target, n: number): Promise<string[]> {
  const pods = (await livePods(target)).sort((a, b) =>
    (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""),
  );
  const victims: string[] = [];
  while (victims.length < n && pods.length > 0) {
    const [pod] = pods.splice(target.rand.int(pods.length), 1);
    victims.push(pod?.metadata?.name ?? "");
  }
  await Promise.all(
    victims.map((name) =>
      core.deleteNamespacedPod({ namespace: target.namespace, name, gracePeriodSeconds: 0 }),
    ),
  );
  return victims;
}

async function quorumFlow(t: Test): Promise<void> {
  await t.test("cluster q (emptyDir members) is created", async (t) => {
    const started = Date.now();
    await createCluster(c, q.namespace, "q", { size: 3, version: V36 });
    t.pass(`Available in ${await waitConverged(q, started, BOUND_MS)} ms`);
  });

  await t.test(
    "recover-from-member, create-recovery-seed, finish-recovery: two of three lost, the worker SIGKILLed at each",
    async (t) => {
      const writer = startWriter(() => endpointsOf(q), "q1/");
      await sleep(3_000);
      let stopping: Promise<WriterResult> | undefined;
      const started = Date.now();
      const report = await killWorkerAt(
        q,
        ["recover-from-member", "create-recovery-seed", "finish-recovery"],
        async () => {
          const victims = await deletePods(q, 2);
          // Without a quorum no write can be acknowledged: the writer's record ends here. Not
          // awaited: its put in flight may take its 5 s deadline, and the kill must not wait.
          stopping = writer.stop();
          return `member pods ${victims.join(", ")} deleted with their data`;
        },
        RESTORE_BOUND_MS,
      );
      const acknowledged = (await stopping)?.acknowledged ?? [];
      const convergeMs = await waitConverged(q, started, QUORUM_BOUND_MS);
      const recovered = await revisionIn(q, "QuorumRecovered", /at revision (\d+)/);
      const missing = await missingWrites(await endpointsOf(q), acknowledged);
      results.push({
        steps: "recover-from-member+create-recovery-seed+finish-recovery",
        detail: report.detail,
        outcomes: killOutcomes(report),
        convergeMs,
        boundMs: QUORUM_BOUND_MS,
        writesChecked: acknowledged.length,
        lost: missing.length,
      });
      t.comment(`${report.detail}: converged in ${convergeMs} ms; recovered at revision ${recovered}`);
      t.comment(`after the kills: ${killOutcomes(report)}`);
      t.ok(convergeMs <= QUORUM_BOUND_MS, `converged in ${convergeMs} ms (bound ${QUORUM_BOUND_MS} ms)`);
      t.ok(acknowledged.length > 10, `${acknowledged.length} writes acknowledged before the loss`);
      t.same(
        missing.filter((w) => w.revision <= recovered).map((w) => w.key),
        [],
        `every write up to revision ${recovered}, the one the QuorumRecovered Event reports, reads back`,
      );
      t.comment(
        `${missing.length} acknowledged writes after that revision lost (the survivor had not applied them)`,
      );
      const evs = await events(q);
      t.ok(
        evs.some(
          (e) =>
            e.reason === "QuorumRecoveryStarted" &&
            /writes it had not applied are lost/.test(e.message ?? ""),
        ),
        "a QuorumRecoveryStarted Event said what may be lost",
      );
      t.notOk(
        (await getCluster(c, q.namespace, "q")).metadata?.annotations?.[RECOVERY_ANNOTATION],
        "the recovery mark was lifted: finish-recovery ran to its end",
      );
    },
  );

  await t.test(
    "all-members-lost, then restore phases Verifying, Staging, Replacing, Seeding: every member lost after a backup, the worker SIGKILLed at each",
    async (t) => {
      const writer = startWriter(() => endpointsOf(q), "q2/");
      await sleep(2_000);
      await createBackup(c, q.namespace, "q-backup", {
        etcdEndpoints: ["http://q-client:2379"],
        storageType: "S3",
        s3: {
          path: "backups/q/etcd.backup",
          awsSecret: "aws",
          endpoint: storeEndpoint,
          forcePathStyle: true,
        },
      });
      const backup = await waitBackupOutcome(c, q.namespace, "q-backup");
      t.equal(backup.succeeded, true, `backup taken at revision ${backup.etcdRevision}`);
      const backupRevision = backup.etcdRevision ?? 0;
      await sleep(2_000);
      let stopping: Promise<WriterResult> | undefined;
      const started = Date.now();
      const report = await killWorkerAt(
        q,
        [
          "all-members-lost",
          { restorePhase: "Verifying" },
          { restorePhase: "Staging" },
          { restorePhase: "Replacing" },
          { restorePhase: "Seeding" },
        ],
        async () => {
          const victims = await deletePods(q, 3);
          // As above: stopped at once, its record awaited after the kills.
          stopping = writer.stop();
          return `every member pod (${victims.join(", ")}) deleted with its data`;
        },
        RESTORE_BOUND_MS,
      );
      const acknowledged = (await stopping)?.acknowledged ?? [];
      const convergeMs = await waitConverged(q, started, RESTORE_BOUND_MS);
      const missing = await missingWrites(await endpointsOf(q), acknowledged);
      const afterBackup = acknowledged.filter((w) => w.revision > backupRevision);
      results.push({
        steps: "all-members-lost+Verifying+Replacing+Seeding",
        detail: report.detail,
        outcomes: killOutcomes(report),
        convergeMs,
        boundMs: RESTORE_BOUND_MS,
        writesChecked: acknowledged.length,
        lost: missing.length,
      });
      t.comment(`${report.detail}: converged in ${convergeMs} ms`);
      t.comment(`after the kills: ${killOutcomes(report)}`);
      t.ok(convergeMs <= RESTORE_BOUND_MS, `converged in ${convergeMs} ms (bound ${RESTORE_BOUND_MS} ms)`);
      t.ok(acknowledged.length - afterBackup.length > 10, "writes acknowledged up to the backup");
      // The backup's revision is read just before its snapshot starts (a lower bound); the restore
      // reads the snapshot's own off the restored member. Nothing up to the reported revision is
      // lost, and exactly what came after the snapshot is.
      const restore = await c.kube.getRestore(q.namespace, "q");
      const restoredRevision = restore?.status?.restoredRevision ?? 0;
      t.same(
        missing.filter((w) => w.revision <= backupRevision).map((w) => w.key),
        [],
        `every write up to the backup's revision ${backupRevision}, which the Event reports, reads back`,
      );
      t.same(
        missing.map((w) => w.key),
        acknowledged.filter((w) => w.revision > restoredRevision).map((w) => w.key),
        `the loss is exactly the writes after the restored revision ${restoredRevision} (${missing.length} of the ${afterBackup.length} after the backup's)`,
      );
      t.equal(restore?.status?.phase, "Completed", "the EtcdRestore ran every phase to Completed");
      t.ok(restoredRevision >= backupRevision, `restored at revision ${restoredRevision}`);
      t.match(
        (await events(q)).find((e) => e.reason === "RestoringFromBackup")?.message,
        new RegExp(`revision ${backupRevision}\\): writes after it are lost`),
        "an Event names the backup's revision and says later writes are lost",
      );
      t.notOk(
        (await getCluster(c, q.namespace, "q")).metadata?.annotations?.[RESTORE_ANNOTATION],
        "the restore mark was lifted",
      );
    },
  );
}

// The two clusters side by side (see the top): each flow is its cases in order.
t.jobs = 2;
await Promise.all([
  t.test("cluster steps: member steps, upgrade and downgrade", { buffered: true }, stepsFlow),
  t.test("cluster q: quorum loss and restore", { buffered: true }, quorumFlow),
]);
t.jobs = 1;

t.test("summary", async (t) => {
  t.comment(JSON.stringify({ seed: SEED, cases: results }));
  t.equal(results.length, 8, "every case ran");
});

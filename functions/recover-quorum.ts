// Steps of a quorum-loss recovery. When most voting members are gone for good (their pods and data
// dirs with them), quorum cannot come back and etcd refuses every change; the original operator
// logged "lost quorum" forever. Here the cluster is rebuilt from the survivor that applied the most
// (the same outcome as etcd's --force-new-cluster, which a pod's fixed command line cannot take):
//   1. recover-from-member: record the plan on the EtcdCluster (an annotation, so a restarted
//      worker carries on) and say in an Event that writes the survivor had not applied are lost;
//   2. create-recovery-seed: a new member whose init containers stream the survivor's snapshot
//      and restore it as a one-member cluster (shared/restore-pods.ts);
//   3. finish-recovery: once the seed serves, delete every other pod, lift the mark, report the
//      revision recovered to; the ordinary rules then add members up to spec.size.
import { randomBytes } from "node:crypto";
import { OLD_LOG_DRAINED_ANNOTATION, RECOVERY_ANNOTATION } from "../shared/api/etcd-cluster.ts";
import { createEtcdClient } from "../shared/etcd-members.ts";
import { imageOf, memberPod, newMemberName } from "../shared/member-pods.ts";
import { createMemberPodWithTls, memberPeerURL, withMemberTls } from "../shared/member-tls.ts";
import { restoreSeedPod } from "../shared/restore-pods.ts";
import type { RecoveryMark } from "./plan.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

export function parseRecoveryMark(value: string | undefined): RecoveryMark | undefined {
  if (!value) return undefined;
  try {
    const parsed = JSON.parse(value) as Partial<RecoveryMark>;
    if (typeof parsed.survivor === "string" && typeof parsed.seed === "string") {
      return {
        survivor: parsed.survivor,
        seed: parsed.seed,
        appliedIndex: String(parsed.appliedIndex ?? "0"),
        startedAtMs: Number(parsed.startedAtMs ?? 0),
      };
    }
  } catch {
    // A mark someone edited by hand into nonsense: treated as absent, and lifted below.
  }
  return undefined;
}

export async function startRecovery(
  input: StepInput,
  deps: StepDeps,
  survivor: string,
  appliedIndex: string,
  lost: number,
  voters: number,
): Promise<StepOutcome> {
  const clusterName = input.cluster.metadata?.name ?? "";
  const mark: RecoveryMark = {
    survivor,
    seed: newMemberName(clusterName),
    appliedIndex,
    startedAtMs: Date.now(),
  };
  const event = {
    type: "Warning" as const,
    reason: "QuorumRecoveryStarted",
    message:
      `quorum lost for good: ${lost} of ${voters} voting members are gone with their data. Rebuilding the cluster ` +
      `from member ${survivor} (raft applied index ${appliedIndex}); writes it had not applied are lost`,
  };
  await deps.guard();
  // The report of what may be lost goes out before the mark is set: a worker killed between the
  // two would otherwise leave it unsent for good (the next look finds the mark and goes on).
  await deps.kube.event(input.cluster, event.type, event.reason, event.message, {
    key: `quorum-recovery.${survivor}.${appliedIndex}`,
  });
  await deps.kube.annotateCluster(input.cluster, { [RECOVERY_ANNOTATION]: JSON.stringify(mark) });
  return { requeueAfterMs: 0, event, announced: true };
}

export async function createRecoverySeed(
  input: StepInput,
  deps: StepDeps,
  seed: string,
  survivorIp: string,
): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const clusterName = input.cluster.metadata?.name ?? "";
  const url = memberPeerURL(input.spec, seed, clusterName, namespace);
  // With TLS the seed gets its certificates like any member, and with client TLS its fetch
  // container dials the survivor with the operator's client certificate.
  const plain = restoreSeedPod({
    pod: memberPod({
      cluster: input.cluster,
      spec: input.spec,
      name: seed,
      initialCluster: [{ name: seed, peerURL: url }],
      state: "new",
    }),
    source: {
      storageType: "Member",
      endpoint: `${input.operatorTls ? "https" : "http"}://${survivorIp}:2379`,
      tls: input.operatorTls,
    },
    operatorImage: deps.operatorImage,
    etcdImage: imageOf(input.spec),
    memberName: seed,
    peerURL: url,
    clusterToken: `${clusterName}-recovery-${randomBytes(4).toString("hex")}`,
  });
  const pod = withMemberTls(plain, input.memberTls);
  await deps.guard();
  await createMemberPodWithTls(deps.kube, input.cluster, input.spec, pod, input.memberTls);
  return {
    requeueAfterMs: 1_000,
    event: {
      type: "Normal",
      reason: "RecoverySeedCreated",
      message: `seed member ${seed} starts from a snapshot of ${survivorIp}`,
    },
  };
}

async function revisionOf(endpoint: string, deps: StepDeps): Promise<string> {
  const client = createEtcdClient(endpoint, deps.etcd);
  try {
    return (await client.maintenance.status()).header.revision;
  } catch {
    return "unknown";
  } finally {
    client.close();
  }
}

export async function finishRecovery(
  input: StepInput,
  deps: StepDeps,
  seed: string,
  survivor: string,
): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  for (const pod of input.observation.pods) {
    if (pod.name === seed || pod.terminating) continue;
    await deps.guard();
    await deps.kube.deletePod(namespace, pod.name);
  }
  const seedIp = input.observation.pods.find((p) => p.name === seed)?.ip;
  const revision = seedIp ? await revisionOf(`http://${seedIp}:2379`, deps) : "unknown";
  const event = {
    type: "Warning" as const,
    reason: "QuorumRecovered",
    message:
      `the cluster was rebuilt from member ${survivor} at revision ${revision}; writes after that revision, if any were ` +
      `acknowledged, are lost. Members are added back up to size ${input.spec.size}`,
  };
  await deps.guard();
  // Sent before the mark is lifted, as in startRecovery: afterwards nothing would send it again.
  await deps.kube.event(input.cluster, event.type, event.reason, event.message, {
    key: `quorum-recovered.${seed}`,
  });
  await deps.kube.annotateCluster(input.cluster, {
    [RECOVERY_ANNOTATION]: null,
    [OLD_LOG_DRAINED_ANNOTATION]: null,
  });
  return { requeueAfterMs: 0, event, announced: true };
}

export async function abortRecovery(input: StepInput, deps: StepDeps, message: string): Promise<StepOutcome> {
  // A seed that cannot get its data would otherwise linger as a pod that never answers, hiding
  // that every member is lost (and so the restore from a backup).
  const seed = input.observation.recovery?.seed;
  const namespace = input.cluster.metadata?.namespace ?? "default";
  if (seed && input.observation.pods.some((p) => p.name === seed && !p.terminating)) {
    await deps.guard();
    await deps.kube.deletePod(namespace, seed);
  }
  await deps.guard();
  await deps.kube.annotateCluster(input.cluster, { [RECOVERY_ANNOTATION]: null });
  return { requeueAfterMs: 5_000, event: { type: "Warning", reason: "QuorumRecoveryFailed", message } };
}

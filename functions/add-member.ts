// Steps: add one member. First `member add` as a learner (a learner does not count towards
// quorum, so a slow or failed start cannot cost availability), then its pod with
// `--initial-cluster-state=existing`. If the worker dies between the two, the planner sees a
// member that was never started and `createMemberPod` finishes the job.
import type { MemberInfo } from "../shared/etcd-members.ts";
import { addLearner } from "../shared/etcd-members.ts";
import { memberPod, newMemberName } from "../shared/member-pods.ts";
import { createMemberPodWithTls, memberPeerURL, withMemberTls } from "../shared/member-tls.ts";
import { memberPodName } from "./plan.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome, unlessRefused } from "./step.ts";

export function initialCluster(members: MemberInfo[]): { name: string; peerURL: string }[] {
  return members.flatMap((m) => {
    const name = memberPodName(m);
    const url = m.peerURLs[0];
    return name && url ? [{ name, peerURL: url }] : [];
  });
}

/**
 * Creates the pod of a member that joins an existing cluster (`--initial-cluster-state=existing`),
 * with the cluster's TLS material and, with persistent storage, its claim.
 */
export async function startJoiningMember(
  input: StepInput,
  deps: StepDeps,
  name: string,
  members: { name: string; peerURL: string }[],
): Promise<void> {
  const pod = memberPod({
    cluster: input.cluster,
    spec: input.spec,
    name,
    initialCluster: members,
    state: "existing",
  });
  await createMemberPodWithTls(
    deps.kube,
    input.cluster,
    input.spec,
    withMemberTls(pod, input.memberTls),
    input.memberTls,
  );
}

export function addMember(input: StepInput, deps: StepDeps, why?: "tls-rotation"): Promise<StepOutcome> {
  return unlessRefused(() => addLearnerAndPod(input, deps, why));
}

async function addLearnerAndPod(
  input: StepInput,
  deps: StepDeps,
  why?: "tls-rotation",
): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const clusterName = input.cluster.metadata?.name ?? "";
  const name = newMemberName(clusterName);
  await deps.guard();
  const added = await addLearner(
    memberEndpoints(input.observation),
    memberPeerURL(input.spec, name, clusterName, namespace),
    deps.etcd,
  );
  await deps.guard();
  await startJoiningMember(input, deps, name, initialCluster(added.members));
  return {
    requeueAfterMs: 500,
    event: {
      type: "Normal",
      reason: "MemberAdded",
      message:
        why === "tls-rotation"
          ? `added member ${name} as a learner with the current TLS certificates, to replace a member on the old ones`
          : `added member ${name} as a learner (${added.members.length} members, target ${input.spec.size})`,
    },
  };
}

export async function createMemberPod(input: StepInput, deps: StepDeps, name: string): Promise<StepOutcome> {
  await deps.guard();
  await startJoiningMember(input, deps, name, initialCluster(input.observation.members ?? []));
  return {
    requeueAfterMs: 500,
    event: {
      type: "Normal",
      reason: "MemberPodCreated",
      message: `created the pod of member ${name}, added to etcd earlier`,
    },
  };
}

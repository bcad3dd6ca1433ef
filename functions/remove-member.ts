// Steps: remove a member (scale-down of a follower, or a dead member about to be replaced) and
// delete a pod that is no member. `member remove` comes first, so the pod is never deleted
// while etcd still counts it; both calls are idempotent, so a replay finishes a half-done step.
import { removeMember as removeFromEtcd } from "../shared/etcd-members.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome, unlessRefused } from "./step.ts";

export async function removeMember(
  input: StepInput,
  deps: StepDeps,
  name: string,
  memberId: string,
  reason: "scale-down" | "dead" | "tls-rotation",
): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  await deps.guard();
  const refused = await unlessRefused(async () => {
    await removeFromEtcd(memberEndpoints(input.observation), memberId, deps.etcd);
    return {};
  });
  if (refused.requeueAfterMs !== undefined) return refused;
  await deps.guard();
  await deps.kube.deletePod(namespace, name);
  return {
    requeueAfterMs: 0,
    event:
      reason === "tls-rotation"
        ? {
            type: "Normal",
            reason: "MemberRotated",
            message: `removed member ${name}, which ran on the previous TLS certificates (a member with the current ones replaced it)`,
          }
        : reason === "dead"
          ? {
              type: "Warning",
              reason: "MemberReplaced",
              message: `member ${name} was lost; removed it so a new member can replace it`,
            }
          : {
              type: "Normal",
              reason: "MemberRemoved",
              message: `removed member ${name} (target size ${input.spec.size})`,
            },
  };
}

export async function deleteMemberPod(
  input: StepInput,
  deps: StepDeps,
  name: string,
  why: string,
): Promise<StepOutcome> {
  await deps.guard();
  await deps.kube.deletePod(input.cluster.metadata?.namespace ?? "default", name);
  return {
    requeueAfterMs: 0,
    event: { type: "Normal", reason: "PodDeleted", message: `deleted pod ${name}: ${why}` },
  };
}

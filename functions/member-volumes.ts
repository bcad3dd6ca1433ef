// Steps for members that keep their data on PersistentVolumeClaims. `restartMember` brings a member
// whose pod is gone back on its surviving claim: same pod name, so the same peer URL, and etcd finds
// its data dir with its member ID and log, so it rejoins as itself and only catches up on what it
// missed (no member remove/add, no full snapshot transfer). `deleteMemberClaim` drops the claim of a
// member that is no more (scaled away, or removed after its data went bad), so volumes do not pile up.
import { memberPeerURL } from "../shared/member-tls.ts";
import { initialCluster, startJoiningMember } from "./add-member.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

export async function restartMember(input: StepInput, deps: StepDeps, name: string): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const clusterName = input.cluster.metadata?.name ?? "";
  // etcd ignores the bootstrap flags when its data dir holds a member; they only matter if the
  // volume is empty (a pod that never started), and then the member list is what it must join.
  const members = input.observation.members ?? [];
  const known = initialCluster(members);
  const self = { name, peerURL: memberPeerURL(input.spec, name, clusterName, namespace) };
  await deps.guard();
  await startJoiningMember(input, deps, name, known.some((m) => m.name === name) ? known : [...known, self]);
  return {
    requeueAfterMs: 500,
    event: {
      type: "Normal",
      reason: "MemberRestarted",
      message: `member ${name} lost its pod; started it again on its volume, with its data and member ID`,
    },
  };
}

export async function deleteMemberClaim(
  input: StepInput,
  deps: StepDeps,
  claimName: string,
  member: string,
): Promise<StepOutcome> {
  await deps.guard();
  await deps.kube.deleteClaim(input.cluster.metadata?.namespace ?? "default", claimName);
  return {
    requeueAfterMs: 0,
    event: {
      type: "Normal",
      reason: "VolumeDeleted",
      message: `deleted volume claim ${claimName}: member ${member} is no longer in the cluster`,
    },
  };
}

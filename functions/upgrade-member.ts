// Steps of a rolling upgrade. `upgradeMember` changes one member pod's image (its data dir stays,
// the kubelet restarts etcd in place on the new version); the planner only picks it when every
// voter is healthy, and waits until the member runs the new version before the next one.
// `moveLeader` hands leadership to an upgraded member so the leader is replaced last.
import { moveLeader as moveEtcdLeader } from "../shared/etcd-members.ts";
import { imageOf, VERSION_ANNOTATION } from "../shared/member-pods.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome } from "./step.ts";

export async function upgradeMember(
  input: StepInput,
  deps: StepDeps,
  name: string,
  from: string,
  to: string,
): Promise<StepOutcome> {
  await deps.guard();
  // Announced before the image changes, under a key of member and version: a worker killed after
  // the patch would otherwise leave the upgrade unannounced, since the retry sees it done.
  await deps.kube.event(
    input.cluster,
    "Normal",
    "MemberUpgraded",
    `upgrading member ${name} from etcd ${from} to ${to}`,
    { key: `upgrade.${name}.${to}` },
  );
  await deps.kube.patchPodImage(
    input.cluster.metadata?.namespace ?? "default",
    name,
    "etcd",
    imageOf({ ...input.spec, version: to }),
    {
      [VERSION_ANNOTATION]: to,
    },
  );
  return { requeueAfterMs: 1_000 };
}

export async function moveLeader(
  input: StepInput,
  deps: StepDeps,
  toId: string,
  toName: string,
  reason: string,
): Promise<StepOutcome> {
  await deps.guard();
  await moveEtcdLeader(memberEndpoints(input.observation), toId, deps.etcd);
  return {
    requeueAfterMs: 0,
    event: { type: "Normal", reason: "LeaderMoved", message: `moved leadership to ${toName}: ${reason}` },
  };
}

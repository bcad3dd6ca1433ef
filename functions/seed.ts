// Step: start a new cluster with one member (`--initial-cluster-state=new`); the others join one
// at a time afterwards, as learners. The pod name is fresh each time, so a replay after a crash
// finds the first pod (the planner sees pods) instead of creating a second seed.
import { memberPod, newMemberName, peerURL } from "../shared/member-pods.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

export async function seed(input: StepInput, deps: StepDeps): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const clusterName = input.cluster.metadata?.name ?? "";
  const name = newMemberName(clusterName);
  await deps.guard();
  await deps.kube.createPod(
    memberPod({
      cluster: input.cluster,
      spec: input.spec,
      name,
      initialCluster: [{ name, peerURL: peerURL(name, clusterName, namespace) }],
      state: "new",
    }),
  );
  return {
    requeueAfterMs: 500,
    event: {
      type: "Normal",
      reason: "SeedMemberCreated",
      message: `created seed member ${name} (etcd ${input.spec.version})`,
    },
  };
}

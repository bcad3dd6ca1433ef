// Step: create the headless peer Service (members' DNS names), the client Service, and the
// PodDisruptionBudget that keeps voluntary evictions from breaking quorum (minAvailable = a
// majority of spec.size). Creating what exists is a no-op, so replaying is harmless.
import { clientService, peerService, quorumBudget } from "../shared/member-pods.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

export async function ensureServices(input: StepInput, deps: StepDeps): Promise<StepOutcome> {
  await deps.guard();
  const created: string[] = [];
  if (!input.observation.services.peer) {
    await deps.kube.createService(peerService(input.cluster));
    created.push("peer Service");
  }
  if (!input.observation.services.client) {
    await deps.kube.createService(clientService(input.cluster));
    created.push("client Service");
  }
  if (input.observation.services.budget === false) {
    await deps.kube.applyPodDisruptionBudget(quorumBudget(input.cluster, input.spec.size));
    created.push("PodDisruptionBudget");
  }
  return {
    requeueAfterMs: 0,
    event: { type: "Normal", reason: "ServicesCreated", message: `created or updated ${created.join(", ")}` },
  };
}

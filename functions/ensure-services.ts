// Step: create the headless peer Service (members' DNS names) and the client Service. Creating
// an existing Service is a no-op, so replaying is harmless.
import { clientService, peerService } from "../shared/member-pods.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

export async function ensureServices(input: StepInput, deps: StepDeps): Promise<StepOutcome> {
  await deps.guard();
  const created: string[] = [];
  if (!input.observation.services.peer) {
    await deps.kube.createService(peerService(input.cluster));
    created.push("peer");
  }
  if (!input.observation.services.client) {
    await deps.kube.createService(clientService(input.cluster));
    created.push("client");
  }
  return {
    requeueAfterMs: 0,
    event: {
      type: "Normal",
      reason: "ServicesCreated",
      message: `created ${created.join(" and ")} Service(s)`,
    },
  };
}

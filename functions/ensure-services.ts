// Step: create the headless peer Service (members' DNS names), the client Service, and the
// PodDisruptionBudget that keeps voluntary evictions from breaking quorum (minAvailable = a
// majority of spec.size). Creating what exists is a no-op, so replaying is harmless; a peer
// Service taken over from coreos is made to publish members that are not Ready.
import { clientService, peerService, quorumBudget } from "../shared/member-pods.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

/**
 * Creates whichever of the three the observation found missing, at once (none needs another), and
 * names what it created. Also the first thing a new cluster's seed step does.
 */
export async function createMissingServices(input: StepInput, deps: StepDeps): Promise<string[]> {
  const { services } = input.observation;
  const work: { what: string; create: () => Promise<unknown> }[] = [];
  if (!services.peer)
    work.push({ what: "peer Service", create: () => deps.kube.applyPeerService(peerService(input.cluster)) });
  if (!services.client)
    work.push({
      what: "client Service",
      create: () => deps.kube.createService(clientService(input.cluster)),
    });
  if (services.budget === false)
    work.push({
      what: "PodDisruptionBudget",
      create: () => deps.kube.applyPodDisruptionBudget(quorumBudget(input.cluster, input.spec.size)),
    });
  if (work.length === 0) return [];
  await deps.guard();
  await Promise.all(work.map((w) => w.create()));
  return work.map((w) => w.what);
}

export function servicesCreatedMessage(created: string[]): string {
  return `created or updated ${created.join(", ")}`;
}

export async function ensureServices(input: StepInput, deps: StepDeps): Promise<StepOutcome> {
  const created = await createMissingServices(input, deps);
  return {
    requeueAfterMs: 0,
    event: { type: "Normal", reason: "ServicesCreated", message: servicesCreatedMessage(created) },
  };
}

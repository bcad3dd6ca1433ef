// Step: bootstrap a brand-new cluster. All spec.size members start at once with a static
// `--initial-cluster` and `--initial-cluster-state=new`, as a script would: safe because there
// is no data yet, and one round of pod starts instead of one learner join per member (each join
// costs etcd's 5-second reconfiguration guard). Every pod records the full member list, so a
// bootstrap cut short by a killed worker is finished with the same names, never a second cluster.
import { BOOTSTRAP_ANNOTATION, memberPod, newMemberName } from "../shared/member-pods.ts";
import { createMemberPodWithTls, memberPeerURL, withMemberTls } from "../shared/member-tls.ts";
import { createMissingServices, servicesCreatedMessage } from "./ensure-services.ts";
import type { StepDeps, StepInput, StepOutcome } from "./step.ts";

export async function seed(input: StepInput, deps: StepDeps, planned?: string[]): Promise<StepOutcome> {
  const namespace = input.cluster.metadata?.namespace ?? "default";
  const clusterName = input.cluster.metadata?.name ?? "";
  const names = planned ?? Array.from({ length: input.spec.size }, () => newMemberName(clusterName));
  const initialCluster = names.map((name) => ({
    name,
    peerURL: memberPeerURL(input.spec, name, clusterName, namespace),
  }));
  // A new cluster's Services come in the same step, before its pods (the peer Service gives the
  // members the DNS names they bootstrap with): a step of their own cost a queue round trip and a
  // second look at the cluster before any pod was asked for.
  const services = await createMissingServices(input, deps);
  let announced: Promise<void> | undefined;
  if (services.length > 0) {
    const message = servicesCreatedMessage(services);
    deps.log.info({ reason: "ServicesCreated" }, message);
    announced = deps.kube.event(input.cluster, "Normal", "ServicesCreated", message);
  }
  const existing = new Set(input.observation.pods.map((p) => p.name));
  const missing = names.filter((name) => !existing.has(name));
  await deps.guard();
  // All at once, as a script would: no member's start waits on another member's API calls.
  await Promise.all(
    missing.map((name) => {
      const pod = withMemberTls(
        memberPod({ cluster: input.cluster, spec: input.spec, name, initialCluster, state: "new" }),
        input.memberTls,
      );
      pod.metadata = {
        ...pod.metadata,
        annotations: { ...pod.metadata?.annotations, [BOOTSTRAP_ANNOTATION]: names.join(",") },
      };
      return createMemberPodWithTls(deps.kube, input.cluster, input.spec, pod, input.memberTls);
    }),
  );
  await announced;
  return {
    requeueAfterMs: 500,
    event: {
      type: "Normal",
      reason: "SeedMemberCreated",
      message: planned
        ? `finished bootstrapping members ${names.join(", ")}`
        : `bootstrapping ${names.length} member(s) ${names.join(", ")} (etcd ${input.spec.version})`,
    },
  };
}

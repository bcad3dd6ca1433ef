// Quorum-loss recovery steps, against a Kube that records the calls: the Events that report what
// may be lost go out before the change they report, so a worker SIGKILLed right after the change
// cannot leave them unsent (the next look finds the change made and moves on). Found by the
// chaos-steps suite, whose kills landed after a step's change as often as before it.
import t from "tap";
import type { Observation, PodView } from "../functions/plan.ts";
import { finishRecovery, startRecovery } from "../functions/recover-quorum.ts";
import type { StepDeps, StepInput } from "../functions/step.ts";
import {
  type EtcdCluster,
  OLD_LOG_DRAINED_ANNOTATION,
  RECOVERY_ANNOTATION,
} from "../shared/api/etcd-cluster.ts";
import type { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";

function recorder() {
  const calls: string[] = [];
  const kube = {
    async event(_o: unknown, _type: string, reason: string, _message: string, options?: { key?: string }) {
      calls.push(`event ${reason}${options?.key ? " (keyed)" : ""}`);
    },
    async annotateCluster(_c: unknown, annotations: Record<string, string | null>) {
      calls.push(`annotate ${Object.keys(annotations).join(",")}`);
    },
    async deletePod(_ns: string, name: string) {
      calls.push(`delete pod ${name}`);
    },
  } as unknown as Kube;
  const deps: StepDeps = {
    kube,
    log: silentLogger(),
    etcd: {},
    guard: async () => {},
    operatorImage: "localhost/etcd-operator:dev",
  };
  return { calls, deps };
}

const pod = (name: string): PodView => ({
  name,
  phase: "Running",
  ready: true,
  terminating: false,
  createdAtMs: 0,
});
const input = (pods: PodView[]): StepInput =>
  ({
    cluster: { metadata: { name: "c", namespace: "default", uid: "u" } } as EtcdCluster,
    spec: { size: 3 },
    observation: { pods } as unknown as Observation,
  }) as StepInput;

t.test("recover-from-member reports the loss before it marks the cluster", async (t) => {
  const { calls, deps } = recorder();
  const outcome = await startRecovery(input([pod("c-a")]), deps, "c-a", "42", 2, 3);
  t.same(calls, ["event QuorumRecoveryStarted (keyed)", `annotate ${RECOVERY_ANNOTATION}`]);
  t.equal(outcome.announced, true, "reconcile does not send it again");
  t.match(outcome.event?.message, /writes it had not applied are lost/, "and has it for the status");
});

t.test("finish-recovery reports the revision before it lifts the mark", async (t) => {
  const { calls, deps } = recorder();
  const outcome = await finishRecovery(input([pod("c-seed"), pod("c-a")]), deps, "c-seed", "c-a");
  t.same(calls.slice(-2), [
    "event QuorumRecovered (keyed)",
    `annotate ${RECOVERY_ANNOTATION},${OLD_LOG_DRAINED_ANNOTATION}`,
  ]);
  t.same(calls.slice(0, 1), ["delete pod c-a"], "the old pods go first");
  t.equal(outcome.announced, true);
});

// Step: promote a learner to a voting member once it has caught up with the leader. etcd itself
// refuses a promotion while the learner lags; that is "check again soon", not an error.
import { promoteLearner } from "../shared/etcd-members.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome } from "./step.ts";

export async function promoteMember(
  input: StepInput,
  deps: StepDeps,
  name: string,
  memberId: string,
): Promise<StepOutcome> {
  await deps.guard();
  const result = await promoteLearner(memberEndpoints(input.observation), memberId, deps.etcd);
  if (result.promoted) {
    return {
      requeueAfterMs: 0,
      event: {
        type: "Normal",
        reason: "MemberPromoted",
        message: `member ${name} caught up and became a voting member`,
      },
    };
  }
  // not-caught-up: try again shortly; not-learner/not-found: the next observation shows why.
  return { requeueAfterMs: result.reason === "not-caught-up" ? 300 : 0 };
}

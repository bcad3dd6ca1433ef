// Step: start an explicitly allowed downgrade with etcd's own procedure (etcd ≥ 3.6): validate
// the target, then enable the downgrade. The leader then lowers the cluster version (and the
// storage version) to the target minor, after which members can be replaced by the older release
// one at a time; etcd ends the downgrade by itself once every member runs it.
import { DowngradeAction } from "etcd3";
import { createEtcdClient } from "../shared/etcd-members.ts";
import { minorOf } from "../shared/etcd-versions.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome } from "./step.ts";

export async function enableDowngrade(
  input: StepInput,
  deps: StepDeps,
  target: string,
): Promise<StepOutcome> {
  const endpoint = memberEndpoints(input.observation)[0];
  if (!endpoint) return { requeueAfterMs: 1_000 };
  // etcd takes a full semantic version and downgrades to its minor.
  const version = `${minorOf(target)}.0`;
  await deps.guard();
  const client = createEtcdClient(endpoint, deps.etcd);
  try {
    await client.maintenance.downgrade({ action: DowngradeAction.Validate, version });
    await client.maintenance.downgrade({ action: DowngradeAction.Enable, version });
  } catch (error) {
    // A retry after a lost answer finds it enabled already: that is the state we want.
    if (!(error instanceof Error && /already enabled|is already/.test(error.message))) {
      throw new Error(
        `etcd refused to downgrade to ${version}: ${error instanceof Error ? error.message : String(error)}`,
        {
          cause: error,
        },
      );
    }
  } finally {
    client.close();
  }
  return {
    requeueAfterMs: 1_000,
    event: {
      type: "Normal",
      reason: "DowngradeEnabled",
      message: `etcd's downgrade to ${minorOf(target)} is enabled; members move to ${target} one at a time, followers first`,
    },
  };
}

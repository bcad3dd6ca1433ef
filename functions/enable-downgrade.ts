// Step: start an explicitly allowed downgrade with etcd's own procedure (etcd ≥ 3.6): validate
// the target, then enable the downgrade. The leader then lowers the cluster version (and the
// storage version) to the target minor, after which members can be replaced by the older release
// one at a time; etcd ends the downgrade by itself once every member runs it.
import { DowngradeAction } from "etcd3";
import { fetchClusterVersion } from "../shared/etcd-http.ts";
import { createEtcdClient } from "../shared/etcd-members.ts";
import { minorOf } from "../shared/etcd-versions.ts";
import { memberEndpoints, type StepDeps, type StepInput, type StepOutcome } from "./step.ts";

/**
 * Whether etcd refused because a downgrade is enabled already ("cluster has a downgrade job in
 * progress", for Validate and Enable alike). That is the state this step wants: a retry after a
 * lost answer or a killed worker, or the planner looking again (it does so after 1 s) before the
 * leader lowered the cluster version (at its next version check, up to ~4 s after the enable).
 * Only one target is possible: etcd enables one minor below the cluster version, and so do we.
 */
export function downgradeAlreadyEnabled(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e.message.includes("cluster has a downgrade job in progress")) return true;
  }
  return false;
}

/** Whether etcd refused the target because it is not one minor below the cluster version. */
export function downgradeTargetRefused(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e.message.includes("invalid downgrade target version")) return true;
  }
  return false;
}

/**
 * etcd checks the target before it checks for a downgrade in progress: once the leader has
 * lowered the cluster version to the target's minor (an earlier try enabled the downgrade and the
 * worker was killed before it could say so, or the plan looked just before the leader acted), a
 * new Validate answers "invalid downgrade target version". The cluster version at the target
 * minor is the state this step wants.
 */
export function downgradeUnderWay(
  error: unknown,
  clusterVersion: string | undefined,
  target: string,
): boolean {
  return (
    downgradeTargetRefused(error) &&
    clusterVersion !== undefined &&
    minorOf(clusterVersion) === minorOf(target)
  );
}

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
    // Enabled already (by an earlier try): wait for the leader to lower the cluster version, and
    // announce nothing again.
    if (downgradeAlreadyEnabled(error)) return { requeueAfterMs: 1_000 };
    if (downgradeUnderWay(error, await fetchClusterVersion(endpoint, deps.etcd), target))
      return { requeueAfterMs: 1_000 };
    throw new Error(
      `etcd refused to downgrade to ${version}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
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

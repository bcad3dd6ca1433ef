// Admission review of EtcdCluster changes: what the CRD schema cannot express. A new or changed spec
// must pass the same validation the reconcile runs (shared/api/validate-etcd-cluster.ts); a change
// must also be one the operator can carry out safely:
// - a scale-down removes at most half of the members at once (each removal needs a majority of the
//   members there at the time, and the removed members' data is gone for good: removing most of a
//   cluster in one edit is seldom meant, e.g. a typo 5 → 1);
// - a version change is no downgrade below what any member runs, and every minor step on its path
//   is one this operator takes in place (functions/plan.ts refuses the same, later and silently);
// - spec.TLS and spec.pod.ClusterDomain do not change: members' peer URLs (scheme and DNS name) are
//   recorded in etcd's member list when they join (coreos did not support changing them either).

import { IN_PLACE_BLOCKED } from "../../../functions/plan.ts";
import { ALLOW_DOWNGRADE_ANNOTATION, clusterNameProblem } from "../../../shared/api/etcd-cluster.ts";
import { validateEtcdClusterSpec } from "../../../shared/api/validate-etcd-cluster.ts";
import {
  DEFAULT_ETCD_VERSION,
  downgradeProblem,
  minorOf,
  parseVersion,
  upgradePath,
} from "../../../shared/etcd-versions.ts";
import { canonicalJson, type Decision, decide, isRecord, type Json, recordAt, show } from "./decision.ts";

export interface ClusterReviewInput {
  operation: "CREATE" | "UPDATE";
  object: unknown;
  oldObject?: unknown;
  /** The etcd versions the cluster's member pods run now (their version annotations), if any. */
  runningVersions?: string[];
}

function versionOf(spec: Json | undefined): string {
  const raw = spec?.version;
  return (typeof raw === "string" ? raw : DEFAULT_ETCD_VERSION).replace(/^v/, "");
}

/** How many members the cluster has now: what the operator last reported, else what was asked. */
export function currentMembers(oldObject: unknown): number | undefined {
  const size = recordAt(oldObject, "status")?.size;
  if (typeof size === "number" && size > 0) return size;
  const wanted = recordAt(oldObject, "spec")?.size;
  return typeof wanted === "number" ? wanted : undefined;
}

/** A scale-down may remove at most half of the members in one change. */
export function scaleDownProblem(members: number | undefined, newSize: unknown): string | undefined {
  if (members === undefined || typeof newSize !== "number" || newSize >= members) return undefined;
  const lowest = Math.ceil(members / 2);
  if (newSize >= lowest) return undefined;
  return (
    `spec.size ${newSize} would remove ${members - newSize} of the cluster's ${members} members in one change: ` +
    `scale down by at most half at a time (each removal needs a majority of the members present, and a ` +
    `removed member's data is deleted); set spec.size to ${lowest} first, wait until the cluster is ` +
    `Available, then go on`
  );
}

const byVersion = (a: string, b: string): number => {
  const x = parseVersion(a) ?? [0, 0, 0];
  const y = parseVersion(b) ?? [0, 0, 0];
  return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
};

/** Problems with moving from the versions members run to `target`. */
export function versionChangeProblem(
  running: string[],
  target: string,
  allowDowngrade = false,
): string | undefined {
  const known = running.filter((v) => parseVersion(v) !== undefined).sort(byVersion);
  const oldest = known[0];
  const newest = known[known.length - 1];
  if (oldest === undefined || newest === undefined) return undefined;
  if (byVersion(target, newest) < 0) {
    if (allowDowngrade) {
      const problem = downgradeProblem(newest, target);
      return problem ? `spec.version ${target}: ${problem}` : undefined;
    }
    return (
      `spec.version ${target} is older than etcd ${newest}, which ${known.length > 1 ? "members of " : ""}the ` +
      `cluster run${known.length > 1 ? "" : "s"}: downgrades are not done automatically (etcd needs its own ` +
      `downgrade procedure, one minor version at a time); keep spec.version at ${newest} or newer, or annotate the ` +
      `cluster ${ALLOW_DOWNGRADE_ANNOTATION}="true" to downgrade one minor version`
    );
  }
  const path = upgradePath(oldest, target);
  if (!path.ok) return `spec.version ${target}: ${path.message}`;
  let from = oldest;
  for (const step of path.steps) {
    const blocked = IN_PLACE_BLOCKED.find((b) => b.from === minorOf(from) && b.to === minorOf(step));
    if (blocked) {
      const via =
        minorOf(oldest) === blocked.from && minorOf(target) === blocked.to
          ? ""
          : ` (the way from ${oldest} to ${target} passes ${blocked.from} → ${blocked.to})`;
      return `spec.version ${target}${via}: ${blocked.message}`;
    }
    from = step;
  }
  return undefined;
}

function clusterDomain(spec: Json | undefined): string {
  const domain = recordAt(spec, "pod")?.ClusterDomain;
  return typeof domain === "string" ? domain.replace(/^\./, "") : "";
}

export function immutableFieldProblems(oldSpec: Json | undefined, newSpec: Json | undefined): string[] {
  const problems: string[] = [];
  if (canonicalJson(oldSpec?.TLS ?? {}) !== canonicalJson(newSpec?.TLS ?? {})) {
    problems.push(
      "spec.TLS cannot change once the cluster exists: each member's peer and client URLs (http or https) " +
        "are recorded in etcd's member list when it joins; create a new cluster with the TLS settings you " +
        "want and copy the keys into it (etcdctl make-mirror): an EtcdRestore into a TLS cluster is not supported yet",
    );
  }
  const before = clusterDomain(oldSpec);
  const after = clusterDomain(newSpec);
  if (before !== after) {
    problems.push(
      `spec.pod.ClusterDomain cannot change once the cluster exists (${show(before)} → ${show(after)}): ` +
        "every member's peer URL, recorded in etcd's member list, contains it",
    );
  }
  return problems;
}

export function reviewEtcdCluster(input: ClusterReviewInput): Decision {
  const spec = recordAt(input.object, "spec");
  const validation = validateEtcdClusterSpec(isRecord(input.object) ? input.object.spec : undefined);
  const name = recordAt(input.object, "metadata")?.name;
  // On CREATE only: an existing cluster with such a name (from before the rule) can still be edited or deleted.
  const nameProblem =
    input.operation === "CREATE" && typeof name === "string" ? clusterNameProblem(name) : undefined;
  if (!validation.ok || nameProblem)
    return decide([...(nameProblem ? [nameProblem] : []), ...(validation.ok ? [] : validation.problems)]);
  if (input.operation !== "UPDATE" || !isRecord(input.oldObject)) return decide([], validation.warnings);

  const oldSpec = recordAt(input.oldObject, "spec");
  const problems: string[] = [];
  const scale = scaleDownProblem(currentMembers(input.oldObject), validation.spec.size);
  if (scale) problems.push(scale);
  // Only a changed version is checked, so other edits of a cluster whose version was refused still go through.
  if (versionOf(oldSpec) !== validation.spec.version) {
    const reported = recordAt(input.oldObject, "status")?.currentVersion;
    const running =
      input.runningVersions && input.runningVersions.length > 0
        ? input.runningVersions
        : [typeof reported === "string" && reported !== "" ? reported : versionOf(oldSpec)];
    const annotations = recordAt(recordAt(input.object, "metadata"), "annotations");
    const allowDowngrade = annotations?.[ALLOW_DOWNGRADE_ANNOTATION] === "true";
    const version = versionChangeProblem(running, validation.spec.version, allowDowngrade);
    if (version) problems.push(version);
  }
  problems.push(...immutableFieldProblems(oldSpec, spec));
  return decide(problems, validation.warnings);
}

/** `kubectl scale` goes through the scale subresource: the same scale-down rule on its replicas. */
export function reviewEtcdClusterScale(oldScale: unknown, newScale: unknown): Decision {
  const replicas = recordAt(newScale, "spec")?.replicas;
  const reported = recordAt(oldScale, "status")?.replicas;
  const wanted = recordAt(oldScale, "spec")?.replicas;
  const members =
    typeof reported === "number" && reported > 0 ? reported : typeof wanted === "number" ? wanted : undefined;
  const problem = scaleDownProblem(members, replicas);
  return decide(problem ? [problem.replace(/^spec\.size/, "replicas")] : []);
}

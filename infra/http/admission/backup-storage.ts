// Admission review of EtcdBackup and EtcdRestore: what their CRD schemas cannot express. The four
// storage types coreos defined (S3, ABS, GCS, OSS) are described once in
// shared/object-store/storages.ts: the section each needs, its Secret field and its bucket naming
// rule. A backup that could never run is refused when it is applied rather than failing in a job.
import { DNS1123_SUBDOMAIN_RE } from "../../../shared/api/etcd-cluster.ts";
import { isStorageType, STORAGE_TYPES, STORAGES } from "../../../shared/object-store/storages.ts";
import { canonicalJson, type Decision, decide, isRecord, type Json, recordAt, show } from "./decision.ts";

function urlProblem(value: unknown, path: string): string | undefined {
  if (typeof value !== "string") return `${path} must be a URL string (got ${show(value)})`;
  try {
    const url = new URL(value);
    if (url.protocol === "http:" || url.protocol === "https:") return undefined;
  } catch {
    // reported below
  }
  return `${path} ${show(value)} is not an http:// or https:// URL`;
}

/** Problems with the storage a backup is written to or a restore reads from. */
export function storageProblems(spec: Json | undefined, typeField: string): string[] {
  const type = spec?.[typeField];
  const types = STORAGE_TYPES.join(", ");
  if (typeof type !== "string" || type === "") return [`spec.${typeField} is required: one of ${types}`];
  if (!isStorageType(type))
    return [`spec.${typeField} ${show(type)} is not a storage type: use one of ${types}`];
  const store = STORAGES[type];
  const section = recordAt(spec, store.section);
  const at = `spec.${store.section}`;
  if (!section) return [`spec.${typeField} ${type} needs the section ${at} (path and ${store.secretField})`];
  const problems: string[] = [];
  const path = section.path;
  const slash = typeof path === "string" ? path.indexOf("/") : -1;
  const word = store.bucketWord;
  if (typeof path !== "string" || slash <= 0 || slash === path.length - 1) {
    problems.push(
      `${at}.path ${show(path)} must be "<${word}>/<path-to-backup>", e.g. "my${word}/etcd.backup"`,
    );
  } else if (!store.bucketPattern.test(path.slice(0, slash))) {
    problems.push(
      `${at}.path ${show(path)} starts with an invalid ${word} name ${show(path.slice(0, slash))}: ` +
        store.bucketRule,
    );
  }
  const secret = section[store.secretField];
  const secretMissing = secret === undefined || secret === "";
  if (
    !(secretMissing && store.secretOptional) &&
    (typeof secret !== "string" || secret.length > 253 || !new RegExp(DNS1123_SUBDOMAIN_RE).test(secret))
  ) {
    problems.push(
      `${at}.${store.secretField} ${show(secret)} must name a Secret in this namespace (lower-case letters, digits, "-" and ".")`,
    );
  }
  if (section.endpoint !== undefined && section.endpoint !== "") {
    const problem = urlProblem(section.endpoint, `${at}.endpoint`);
    if (problem) problems.push(problem);
  }
  return problems;
}

export interface ObjectReviewInput {
  operation: "CREATE" | "UPDATE";
  object: unknown;
  oldObject?: unknown;
}

export function reviewEtcdBackup(input: ObjectReviewInput): Decision {
  const spec = recordAt(input.object, "spec");
  if (!spec) return decide(["spec is required: give storageType and its section (s3, abs, gcs or oss)"]);
  const problems = storageProblems(spec, "storageType");
  const warnings: string[] = [];
  const endpoints = spec.etcdEndpoints;
  if (endpoints !== undefined) {
    if (!Array.isArray(endpoints)) problems.push(`spec.etcdEndpoints must be a list of URLs`);
    else
      endpoints.forEach((endpoint: unknown, i) => {
        const problem = urlProblem(endpoint, `spec.etcdEndpoints[${i}]`);
        if (problem) problems.push(problem);
      });
  }
  const policy = recordAt(spec, "backupPolicy");
  const interval = policy?.backupIntervalInSecond;
  if (
    typeof policy?.maxBackups === "number" &&
    policy.maxBackups > 0 &&
    !(typeof interval === "number" && interval > 0)
  ) {
    warnings.push(
      "spec.backupPolicy.maxBackups only applies to periodic backups; set backupIntervalInSecond to take them",
    );
  }
  if (input.operation === "UPDATE" && isRecord(input.oldObject)) {
    const before = recordAt(input.oldObject, "spec")?.storageType;
    if (before !== undefined && before !== spec.storageType) {
      problems.push(
        `spec.storageType cannot change (${show(before)} → ${show(spec.storageType)}): the backups already ` +
          "taken and their rotation (maxBackups) belong to the old store; create a new EtcdBackup instead",
      );
    }
  }
  return decide(problems, warnings);
}

export function reviewEtcdRestore(input: ObjectReviewInput): Decision {
  const spec = recordAt(input.object, "spec");
  if (!spec) return decide(["spec is required: give etcdCluster.name, backupStorageType and its section"]);
  const problems = storageProblems(spec, "backupStorageType");
  const clusterName = recordAt(spec, "etcdCluster")?.name;
  if (typeof clusterName !== "string" || clusterName === "") {
    problems.push("spec.etcdCluster.name is required: the EtcdCluster to restore, in this namespace");
  }
  if (input.operation === "UPDATE" && isRecord(input.oldObject)) {
    const before = recordAt(input.oldObject, "spec");
    if (canonicalJson(before ?? {}) !== canonicalJson(spec)) {
      problems.push(
        "the spec of an EtcdRestore cannot change once it is created: a restore is a one-off action; " +
          "delete this EtcdRestore and create a new one",
      );
    }
  }
  return decide(problems);
}

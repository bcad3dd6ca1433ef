// Validation and normalization of an EtcdCluster spec: what the CRD schema cannot express
// (supported etcd minors, reserved names, the operator's own flags) with messages a person
// understands, and the spec with its defaults filled in for the reconcile functions.
import { Value } from "@sinclair/typebox/value";
import { cronProblem } from "../cron.ts";
import { DEFAULT_ETCD_VERSION, ETCD_VERSIONS, minorOf } from "../etcd-versions.ts";
import {
  DEFAULT_BUSYBOX_IMAGE,
  DEFAULT_DEFRAG_MINIMUM_BYTES,
  DEFAULT_DEFRAG_THRESHOLD_PERCENT,
  DEFAULT_REPOSITORY,
  ENV_NAME_RE,
  ETCD_ARG_RE,
  type EtcdClusterSpec,
  EtcdClusterSpecSchema,
  etcdArgFlag,
  IMAGE_RE,
  isDnsSubdomain,
  isOperatorOwnedEtcdEnv,
  isOperatorOwnedEtcdFlag,
  LABEL_NAME_RE,
  LABEL_VALUE_RE,
  MAX_CLUSTER_SIZE,
  MAX_QUOTA_BACKEND_BYTES,
  type Maintenance,
  MIN_QUOTA_BACKEND_BYTES,
  type NormalizedMaintenance,
  type NormalizedSpec,
  OLDEST_SUPPORTED_MINOR,
  parseMinor,
  REPOSITORY_RE,
  RESERVED_ANNOTATIONS,
  RESERVED_LABEL_KEYS,
  RESERVED_LABEL_PREFIX,
  type SpecValidation,
  VERSION_RE,
} from "./etcd-cluster.ts";

/** The minors this operator builds and tests: the ones to suggest. */
function testedMinors(): string[] {
  return ETCD_VERSIONS.map(minorOf);
}

function listInWords(items: string[]): string {
  if (items.length <= 1) return items.join("");
  return `${items.slice(0, -1).join(", ")} or ${items[items.length - 1]}`;
}

interface Problem {
  path: string;
  message: string;
}

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function show(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : (JSON.stringify(value) ?? String(value));
}

const matches = (re: string, value: string): boolean => new RegExp(re).test(value);

/**
 * Checks an EtcdCluster spec (as read from the API or a manifest) beyond what the CRD schema enforces and
 * fills in its defaults. Problems are whole sentences naming the field, for conditions, Events and
 * admission responses.
 */
export function validateEtcdClusterSpec(spec: unknown): SpecValidation {
  if (!isRecord(spec)) {
    return { ok: false, problems: [`spec must be an object with at least spec.size (got ${show(spec)})`] };
  }
  const problems: Problem[] = [];
  const warnings: string[] = [];
  checkSize(spec.size, problems, warnings);
  const version = checkVersion(spec.version ?? DEFAULT_ETCD_VERSION, problems, warnings);
  const repository = spec.repository ?? DEFAULT_REPOSITORY;
  checkRepository(repository, problems);
  if (spec.paused !== undefined && typeof spec.paused !== "boolean") {
    problems.push({
      path: "spec.paused",
      message: `spec.paused must be true or false (got ${show(spec.paused)})`,
    });
  }
  if (spec.pod !== undefined) checkPod(spec.pod, problems);
  if (spec.TLS !== undefined) checkTls(spec.TLS, problems);
  if (spec.maintenance !== undefined) checkMaintenance(spec.maintenance, spec.pod, problems);
  // Whatever else the schema finds (a wrong type deep in the pod policy, say), unless a check above
  // already explained that field better.
  for (const error of Value.Errors(EtcdClusterSpecSchema, spec)) {
    const path = `spec${pointerToPath(error.path)}`;
    const key = canonical(path);
    if (problems.some((p) => key === canonical(p.path) || key.startsWith(`${canonical(p.path)}.`))) continue;
    problems.push({ path, message: `${path}: ${error.message.toLowerCase()} (got ${show(error.value)})` });
  }
  if (problems.length > 0 || version === undefined || typeof repository !== "string") {
    return { ok: false, problems: problems.map((p) => p.message) };
  }
  const valid = spec as EtcdClusterSpec;
  const normalized: NormalizedSpec = {
    size: valid.size,
    repository,
    version,
    paused: valid.paused ?? false,
    pod: valid.pod ?? {},
    maintenance: normalizedMaintenance(valid.maintenance),
  };
  if (valid.TLS !== undefined) normalized.TLS = valid.TLS;
  return { ok: true, spec: normalized, warnings };
}

export function normalizedMaintenance(maintenance: Maintenance | undefined): NormalizedMaintenance {
  const defrag = maintenance?.defragmentation;
  const normalized: NormalizedMaintenance = {
    defragmentation: {
      enabled: defrag?.enabled ?? true,
      thresholdPercent: defrag?.thresholdPercent ?? DEFAULT_DEFRAG_THRESHOLD_PERCENT,
      minimumBytes: defrag?.minimumBytes ?? DEFAULT_DEFRAG_MINIMUM_BYTES,
    },
  };
  if (defrag?.schedule) normalized.defragmentation.schedule = defrag.schedule;
  if (maintenance?.quotaBackendBytes !== undefined)
    normalized.quotaBackendBytes = maintenance.quotaBackendBytes;
  return normalized;
}

const MIB = 1024 * 1024;

function checkMaintenance(maintenance: unknown, pod: unknown, problems: Problem[]): void {
  const path = "spec.maintenance";
  if (!isRecord(maintenance)) {
    problems.push({ path, message: `${path} must be an object (got ${show(maintenance)})` });
    return;
  }
  const quota = maintenance.quotaBackendBytes;
  if (quota !== undefined) {
    const at = `${path}.quotaBackendBytes`;
    if (
      typeof quota !== "number" ||
      !Number.isInteger(quota) ||
      quota < MIN_QUOTA_BACKEND_BYTES ||
      quota > MAX_QUOTA_BACKEND_BYTES
    ) {
      problems.push({
        path: at,
        message:
          `${at} must be a whole number of bytes from ${MIN_QUOTA_BACKEND_BYTES} (16 MiB) to ` +
          `${MAX_QUOTA_BACKEND_BYTES} (64 GiB) (got ${show(quota)}); for 8 GiB write ${8 * 1024 * MIB}`,
      });
    }
    const args = isRecord(pod) && Array.isArray(pod.etcdArgs) ? pod.etcdArgs : [];
    const index = args.findIndex((a) => typeof a === "string" && etcdArgFlag(a) === "--quota-backend-bytes");
    if (index >= 0) {
      problems.push({
        path: `spec.pod.etcdArgs[${index}]`,
        message: `spec.pod.etcdArgs[${index}] sets --quota-backend-bytes and so does ${at}; keep one (${at} is the operator's setting)`,
      });
    }
  }
  const defrag = maintenance.defragmentation;
  if (defrag === undefined) return;
  const at = `${path}.defragmentation`;
  if (!isRecord(defrag)) {
    problems.push({ path: at, message: `${at} must be an object (got ${show(defrag)})` });
    return;
  }
  const threshold = defrag.thresholdPercent;
  if (
    threshold !== undefined &&
    (typeof threshold !== "number" || !Number.isInteger(threshold) || threshold < 1 || threshold > 99)
  ) {
    problems.push({
      path: `${at}.thresholdPercent`,
      message: `${at}.thresholdPercent must be a whole percentage from 1 to 99 (got ${show(threshold)})`,
    });
  }
  const schedule = defrag.schedule;
  if (schedule !== undefined) {
    const problem = typeof schedule === "string" ? cronProblem(schedule) : "it must be a string";
    if (problem) {
      problems.push({
        path: `${at}.schedule`,
        message: `${at}.schedule ${show(schedule)} is not a cron schedule of five fields (minute hour day-of-month month day-of-week, in UTC, e.g. "0 3 * * 0"): ${problem}`,
      });
    }
  }
  const minimum = defrag.minimumBytes;
  if (minimum !== undefined && (typeof minimum !== "number" || !Number.isInteger(minimum) || minimum < 0)) {
    problems.push({
      path: `${at}.minimumBytes`,
      message: `${at}.minimumBytes must be a whole number of bytes, 0 or more (got ${show(minimum)})`,
    });
  }
}

/** `a["b"][0]` → "a.b.0", to compare paths however they were written. */
function canonical(path: string): string {
  return path.replace(/\[("(?:[^"\\]|\\.)*"|[0-9]+)\]/g, (_, inner: string) =>
    inner.startsWith('"') ? `.${JSON.parse(inner)}` : `.${inner}`,
  );
}

/** "/pod/etcdEnv/0/name" → ".pod.etcdEnv[0].name" */
function pointerToPath(pointer: string): string {
  return pointer
    .split("/")
    .slice(1)
    .map((segment) => segment.replaceAll("~1", "/").replaceAll("~0", "~"))
    .map((segment) =>
      /^[0-9]+$/.test(segment)
        ? `[${segment}]`
        : /^[A-Za-z_][A-Za-z0-9_]*$/.test(segment)
          ? `.${segment}`
          : `[${JSON.stringify(segment)}]`,
    )
    .join("");
}

function checkSize(size: unknown, problems: Problem[], warnings: string[]): void {
  const path = "spec.size";
  if (size === undefined) {
    problems.push({ path, message: "spec.size is required: the number of etcd members, e.g. 3" });
  } else if (typeof size !== "number" || !Number.isInteger(size)) {
    problems.push({ path, message: `spec.size must be a whole number of members (got ${show(size)})` });
  } else if (size < 1) {
    problems.push({
      path,
      message: `spec.size ${size} is too small: an etcd cluster needs at least 1 member`,
    });
  } else if (size > MAX_CLUSTER_SIZE) {
    problems.push({
      path,
      message:
        `spec.size ${size} is too large: this operator runs at most ${MAX_CLUSTER_SIZE} members, because every ` +
        "write waits for a majority of them; 3, 5 or 7 are the usual sizes",
    });
  } else if (size % 2 === 0) {
    warnings.push(
      `spec.size ${size} is even: it tolerates no more failed members than ${size - 1} would; ` +
        `an odd size (${size - 1} or ${size + 1}) is recommended`,
    );
  }
}

/** The version without "v", or undefined after recording why it cannot be used. */
function checkVersion(version: unknown, problems: Problem[], warnings: string[]): string | undefined {
  const path = "spec.version";
  const suggestion = `use ${listInWords(testedMinors())} (e.g. "${DEFAULT_ETCD_VERSION}")`;
  if (typeof version !== "string") {
    problems.push({
      path,
      message: `spec.version must be a string like "${DEFAULT_ETCD_VERSION}" (got ${show(version)})`,
    });
    return undefined;
  }
  const parts = new RegExp(VERSION_RE).exec(version);
  if (!parts) {
    problems.push({
      path,
      message:
        `spec.version ${show(version)} is not an etcd release: give major.minor.patch like ` +
        `"${DEFAULT_ETCD_VERSION}" (a leading "v" is allowed)`,
    });
    return undefined;
  }
  const [major, minor] = [Number(parts[1]), Number(parts[2])];
  const oldest = parseMinor(OLDEST_SUPPORTED_MINOR);
  const newest = parseMinor(minorOf(DEFAULT_ETCD_VERSION));
  const notSupported = `spec.version ${show(version)} is not supported`;
  if (major < 3 || (major === 3 && minor < oldest)) {
    problems.push({
      path,
      message: `${notSupported}: etcd older than ${OLDEST_SUPPORTED_MINOR} cannot be run by this operator; ${suggestion}`,
    });
    return undefined;
  }
  if (major > 3 || minor > newest) {
    problems.push({
      path,
      message: `${notSupported}: etcd ${major}.${minor} is newer than this operator knows (newest: 3.${newest}); ${suggestion}`,
    });
    return undefined;
  }
  const normalized = version.replace(/^v/, "");
  if (!testedMinors().includes(minorOf(normalized))) {
    warnings.push(
      `spec.version ${show(version)}: etcd 3.${minor} runs but is not tested by this operator; ${suggestion}`,
    );
  }
  return normalized;
}

function checkRepository(repository: unknown, problems: Problem[]): void {
  const path = "spec.repository";
  const example = `like "${DEFAULT_REPOSITORY}"`;
  if (typeof repository !== "string") {
    problems.push({ path, message: `spec.repository must be a string ${example} (got ${show(repository)})` });
    return;
  }
  const forbidden = [...new Set(repository.match(/[^A-Za-z0-9._\-/:@]/g) ?? [])];
  const lastSegment = repository.slice(repository.lastIndexOf("/") + 1);
  if (forbidden.length > 0) {
    problems.push({
      path,
      message:
        `spec.repository ${show(repository)} contains characters that cannot appear in an image repository ` +
        `(${forbidden.map(show).join(", ")}): give a repository ${example}`,
    });
  } else if (lastSegment.includes(":") || repository.includes("@")) {
    problems.push({
      path,
      message:
        `spec.repository ${show(repository)} must not carry a tag or digest: the operator runs ` +
        `<repository>:v<spec.version>, so give ${show(repository.replace(/(@.*|:[^/:]*)$/, ""))} and set spec.version`,
    });
  } else if (repository.length > 255 || !matches(REPOSITORY_RE, repository)) {
    problems.push({
      path,
      message:
        `spec.repository ${show(repository)} is not a valid image repository: give [registry[:port]/]path ` +
        `with a lower-case path, ${example}`,
    });
  }
}

/** A label key: an optional DNS subdomain and "/", then a name of ≤ 63 characters. */
function labelKeyProblem(key: string): string | undefined {
  const slash = key.indexOf("/");
  const prefix = slash >= 0 ? key.slice(0, slash) : undefined;
  const name = slash >= 0 ? key.slice(slash + 1) : key;
  if (prefix !== undefined && !isDnsSubdomain(prefix)) {
    return `its prefix ${show(prefix)} must be a lower-case DNS subdomain like "example.com"`;
  }
  if (name.length === 0 || name.length > 63 || !matches(LABEL_NAME_RE, name)) {
    return (
      `its name ${show(name)} must be 1 to 63 letters, digits, "-", "_" or "." and start and end with ` +
      "a letter or digit"
    );
  }
  return undefined;
}

function checkStringMap(
  value: unknown,
  path: string,
  what: "label" | "annotation",
  problems: Problem[],
): Json | undefined {
  if (!isRecord(value)) {
    problems.push({
      path,
      message: `${path} must be a map of ${what} keys to string values (got ${show(value)})`,
    });
    return undefined;
  }
  for (const [key, v] of Object.entries(value)) {
    const at = `${path}[${JSON.stringify(key)}]`;
    const keyProblem = labelKeyProblem(key);
    if (keyProblem) {
      problems.push({ path: at, message: `${path} has an invalid ${what} key ${show(key)}: ${keyProblem}` });
    } else if (typeof v !== "string") {
      problems.push({
        path: at,
        message: `${at} must be a string (got ${show(v)}); quote numbers and booleans`,
      });
    } else if (what === "label" && (v.length > 63 || !matches(LABEL_VALUE_RE, v))) {
      problems.push({
        path: at,
        message:
          `${at} has an invalid value ${show(v)}: label values are at most 63 letters, digits, "-", "_" or "." ` +
          "and start and end with a letter or digit",
      });
    }
  }
  return value;
}

function checkPod(pod: unknown, problems: Problem[]): void {
  const path = "spec.pod";
  if (!isRecord(pod)) {
    problems.push({ path, message: `spec.pod must be an object (got ${show(pod)})` });
    return;
  }
  if (pod.labels !== undefined) {
    const labels = checkStringMap(pod.labels, `${path}.labels`, "label", problems);
    for (const key of Object.keys(labels ?? {})) {
      if (RESERVED_LABEL_KEYS.includes(key) || key.startsWith(RESERVED_LABEL_PREFIX)) {
        problems.push({
          path: `${path}.labels[${JSON.stringify(key)}]`,
          message:
            `spec.pod.labels must not set ${show(key)}: the operator labels its pods with "app" and "etcd_*" ` +
            "and finds them by those labels",
        });
      }
    }
  }
  if (pod.nodeSelector !== undefined)
    checkStringMap(pod.nodeSelector, `${path}.nodeSelector`, "label", problems);
  if (pod.annotations !== undefined) {
    const annotations = checkStringMap(pod.annotations, `${path}.annotations`, "annotation", problems);
    for (const key of Object.keys(annotations ?? {})) {
      if (RESERVED_ANNOTATIONS.includes(key)) {
        problems.push({
          path: `${path}.annotations[${JSON.stringify(key)}]`,
          message: `spec.pod.annotations must not set ${show(key)}: the operator records each member's etcd version in it`,
        });
      }
    }
  }
  if (pod.etcdEnv !== undefined) checkEtcdEnv(pod.etcdEnv, problems);
  if (pod.etcdArgs !== undefined) checkEtcdArgs(pod.etcdArgs, problems);
  const priorityClass = pod.priorityClassName;
  if (priorityClass !== undefined && (typeof priorityClass !== "string" || !isDnsSubdomain(priorityClass))) {
    problems.push({
      path: `${path}.priorityClassName`,
      message: `spec.pod.priorityClassName ${show(priorityClass)} must be the name of a PriorityClass (a lower-case DNS name)`,
    });
  }
  if (pod.busyboxImage !== undefined) {
    const image = pod.busyboxImage;
    if (typeof image !== "string" || image.length > 512 || !matches(IMAGE_RE, image)) {
      problems.push({
        path: `${path}.busyboxImage`,
        message: `spec.pod.busyboxImage ${show(image)} is not a valid image reference, e.g. "${DEFAULT_BUSYBOX_IMAGE}"`,
      });
    }
  }
  const timeout = pod.DNSTimeoutInSecond;
  if (timeout !== undefined && (typeof timeout !== "number" || !Number.isInteger(timeout) || timeout < 0)) {
    problems.push({
      path: `${path}.DNSTimeoutInSecond`,
      message: `spec.pod.DNSTimeoutInSecond must be a whole number of seconds, 0 or more (got ${show(timeout)})`,
    });
  }
  const domain = pod.ClusterDomain;
  if (domain !== undefined && domain !== "") {
    const bare = typeof domain === "string" ? domain.replace(/^\./, "") : domain;
    if (typeof bare !== "string" || !isDnsSubdomain(bare)) {
      problems.push({
        path: `${path}.ClusterDomain`,
        message: `spec.pod.ClusterDomain ${show(domain)} must be a lower-case DNS domain like ".cluster.local"`,
      });
    }
  }
}

function checkEtcdArgs(args: unknown, problems: Problem[]): void {
  const path = "spec.pod.etcdArgs";
  if (!Array.isArray(args)) {
    problems.push({ path, message: `${path} must be a list of "--flag=value" strings (got ${show(args)})` });
    return;
  }
  const seen = new Set<string>();
  args.forEach((arg: unknown, index) => {
    const at = `${path}[${index}]`;
    if (typeof arg !== "string" || arg.length > 1024 || !matches(ETCD_ARG_RE, arg)) {
      problems.push({
        path: at,
        message: `${at} ${show(arg)} is not an etcd flag: write "--flag=value" or "--flag", on one line`,
      });
      return;
    }
    const flag = etcdArgFlag(arg);
    if (isOperatorOwnedEtcdFlag(arg)) {
      problems.push({
        path: at,
        message:
          `${at} sets ${flag}, which the operator sets itself from the cluster spec; remove it. ` +
          "`kubectl explain etcdcluster.spec.pod.etcdArgs` lists the flags the operator owns",
      });
    } else if (seen.has(flag)) {
      problems.push({ path: at, message: `${at} sets ${flag} a second time; keep one entry` });
    }
    seen.add(flag);
  });
}

function checkEtcdEnv(env: unknown, problems: Problem[]): void {
  const path = "spec.pod.etcdEnv";
  if (!Array.isArray(env)) {
    problems.push({ path, message: `${path} must be a list of {name, value} entries (got ${show(env)})` });
    return;
  }
  const seen = new Set<string>();
  env.forEach((entry: unknown, index) => {
    const at = `${path}[${index}]`;
    if (!isRecord(entry) || typeof entry.name !== "string") {
      problems.push({ path: at, message: `${at} must be an entry with a name (got ${show(entry)})` });
      return;
    }
    const name = entry.name;
    if (!matches(ENV_NAME_RE, name)) {
      problems.push({
        path: at,
        message: `${at} has an invalid name ${show(name)}: use letters, digits, "_", "-" or ".", not starting with a digit`,
      });
    } else if (isOperatorOwnedEtcdEnv(name)) {
      problems.push({
        path: at,
        message:
          `${at} sets ${name}, which the operator sets itself from the cluster spec (etcd would refuse to ` +
          "start with both); remove it. `kubectl explain etcdcluster.spec.pod.etcdEnv` lists the variables " +
          "the operator owns",
      });
    } else if (seen.has(name)) {
      problems.push({ path: at, message: `${at} sets ${name} a second time; keep one entry` });
    } else if (entry.value !== undefined && entry.valueFrom !== undefined) {
      problems.push({ path: at, message: `${at} (${name}) gives both value and valueFrom; keep one` });
    }
    seen.add(name);
  });
}

function checkTls(tls: unknown, problems: Problem[]): void {
  if (!isRecord(tls)) {
    problems.push({ path: "spec.TLS", message: `spec.TLS must be an object (got ${show(tls)})` });
    return;
  }
  if (tls.static === undefined) return;
  const staticTls = tls.static;
  if (!isRecord(staticTls)) {
    problems.push({
      path: "spec.TLS.static",
      message: `spec.TLS.static must be an object (got ${show(staticTls)})`,
    });
    return;
  }
  const member = isRecord(staticTls.member) ? staticTls.member : {};
  const secrets: [string, unknown][] = [
    ["spec.TLS.static.member.peerSecret", member.peerSecret],
    ["spec.TLS.static.member.serverSecret", member.serverSecret],
    ["spec.TLS.static.operatorSecret", staticTls.operatorSecret],
  ];
  for (const [path, name] of secrets) {
    if (name === undefined) continue;
    if (typeof name !== "string" || !isDnsSubdomain(name)) {
      problems.push({
        path,
        message: `${path} ${show(name)} is not a valid Secret name: use lower-case letters, digits, "-" and "."`,
      });
    }
  }
  // coreos's rule: client TLS on the members means the operator needs a client certificate, and a client
  // certificate without client TLS is a mistake.
  const hasServer = typeof member.serverSecret === "string" && member.serverSecret !== "";
  const hasOperator = typeof staticTls.operatorSecret === "string" && staticTls.operatorSecret !== "";
  if (hasServer !== hasOperator) {
    problems.push({
      path: "spec.TLS.static",
      message: hasServer
        ? "spec.TLS.static.member.serverSecret is set but operatorSecret is not: the operator needs a client " +
          "certificate (operatorSecret) to reach members that serve clients over TLS"
        : "spec.TLS.static.operatorSecret is set but member.serverSecret is not: give the members a server " +
          "certificate too, or drop operatorSecret",
    });
  }
}

// A container's environment, as a real kubelet builds it: envFrom first, then env in order, each
// value able to reference the ones before it with $(VAR) ($$(VAR) escapes); values from the
// downward API (fieldRef, resourceFieldRef), Secrets and ConfigMaps. Command and args expand
// $(VAR) against the final environment. Nothing here goes through a shell.
import type {
  V1Container,
  V1ObjectFieldSelector,
  V1Pod,
  V1ResourceFieldSelector,
} from "@kubernetes/client-node";

/** Reads referenced objects; returns undefined when the object does not exist. */
export interface ObjectSource {
  secretData(namespace: string, name: string): Promise<Record<string, Buffer> | undefined>;
  configMapData(namespace: string, name: string): Promise<Record<string, string> | undefined>;
}

export class MissingReferenceError extends Error {
  override name = "MissingReferenceError";
}

export const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Expands $(VAR) from `vars`; unknown references stay as written, $$ escapes, as Kubernetes does. */
export function expandVars(input: string, vars: Record<string, string>): string {
  let out = "";
  for (let i = 0; i < input.length; i++) {
    const ch = input[i];
    if (ch === "$" && input[i + 1] === "$") {
      out += "$";
      i++;
      continue;
    }
    if (ch === "$" && input[i + 1] === "(") {
      const end = input.indexOf(")", i + 2);
      if (end !== -1) {
        const name = input.slice(i + 2, end);
        if (Object.hasOwn(vars, name)) {
          out += vars[name];
          i = end;
          continue;
        }
      }
    }
    out += ch;
  }
  return out;
}

function labelOrAnnotation(map: Record<string, string> | undefined, path: string, prefix: string): string {
  const match = new RegExp(`^${prefix}\\['(.+)'\\]$`).exec(path);
  if (!match?.[1]) return "";
  return map?.[match[1]] ?? "";
}

function formatMap(map: Record<string, string> | undefined): string {
  return Object.entries(map ?? {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join("\n");
}

/** The value of a downward-API fieldRef, for env vars and downwardAPI volume files. */
export function fieldRefValue(
  pod: V1Pod,
  selector: V1ObjectFieldSelector,
  podIp: string,
  hostIp: string,
): string {
  const path = selector.fieldPath;
  const meta = pod.metadata ?? {};
  switch (path) {
    case "metadata.name":
      return meta.name ?? "";
    case "metadata.namespace":
      return meta.namespace ?? "";
    case "metadata.uid":
      return meta.uid ?? "";
    case "metadata.labels":
      return formatMap(meta.labels);
    case "metadata.annotations":
      return formatMap(meta.annotations);
    case "spec.nodeName":
      return pod.spec?.nodeName ?? "";
    case "spec.serviceAccountName":
      return pod.spec?.serviceAccountName ?? "";
    case "status.hostIP":
    case "status.hostIPs":
      return hostIp;
    case "status.podIP":
    case "status.podIPs":
      return podIp;
  }
  if (path.startsWith("metadata.labels[")) return labelOrAnnotation(meta.labels, path, "metadata\\.labels");
  if (path.startsWith("metadata.annotations["))
    return labelOrAnnotation(meta.annotations, path, "metadata\\.annotations");
  throw new MissingReferenceError(`unsupported fieldRef path "${path}"`);
}

function quantityToNumber(quantity: string): number {
  const match = /^([0-9.]+)([a-zA-Z]*)$/.exec(quantity);
  if (!match) return 0;
  const value = Number(match[1]);
  const factors: Record<string, number> = {
    "": 1,
    m: 1e-3,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    Ki: 1024,
    Mi: 1024 ** 2,
    Gi: 1024 ** 3,
    Ti: 1024 ** 4,
  };
  return value * (factors[match[2] ?? ""] ?? 1);
}

/** resourceFieldRef, rounded up to the divisor as Kubernetes does; node capacity when unset. */
export function resourceFieldValue(
  container: V1Container | undefined,
  selector: V1ResourceFieldSelector,
): string {
  const [kind, resource] = selector.resource.split(".");
  const fromSpec =
    kind === "limits"
      ? container?.resources?.limits?.[resource ?? ""]
      : container?.resources?.requests?.[resource ?? ""];
  const fallback = resource === "cpu" ? "2" : String(24 * 1024 ** 3);
  const value = quantityToNumber(String(fromSpec ?? fallback));
  const divisor = quantityToNumber(String(selector.divisor ?? "1")) || 1;
  return String(Math.ceil(value / divisor));
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function setFromSource(env: Record<string, string>, name: string, value: string, skipped: string[]): void {
  if (ENV_NAME.test(name)) env[name] = value;
  else skipped.push(name);
}

export async function containerEnv(
  pod: V1Pod,
  container: V1Container,
  source: ObjectSource,
  addresses: { podIp: string; hostIp: string; hostname: string },
  /** Receives envFrom keys that are not valid variable names; the kubelet skips them with an event. */
  skipped: string[] = [],
): Promise<Record<string, string>> {
  const namespace = pod.metadata?.namespace ?? "default";
  const env: Record<string, string> = { PATH: DEFAULT_PATH, HOSTNAME: addresses.hostname };

  for (const from of container.envFrom ?? []) {
    const prefix = from.prefix ?? "";
    if (from.configMapRef) {
      const data = await source.configMapData(namespace, from.configMapRef.name ?? "");
      if (!data && !from.configMapRef.optional) {
        throw new MissingReferenceError(`configmap "${from.configMapRef.name}" not found`);
      }
      for (const [k, v] of Object.entries(data ?? {})) setFromSource(env, prefix + k, v, skipped);
    }
    if (from.secretRef) {
      const data = await source.secretData(namespace, from.secretRef.name ?? "");
      if (!data && !from.secretRef.optional)
        throw new MissingReferenceError(`secret "${from.secretRef.name}" not found`);
      for (const [k, v] of Object.entries(data ?? {}))
        setFromSource(env, prefix + k, v.toString("utf8"), skipped);
    }
  }

  for (const variable of container.env ?? []) {
    if (variable.value !== undefined) {
      env[variable.name] = expandVars(variable.value, env);
      continue;
    }
    const from = variable.valueFrom;
    if (!from) {
      env[variable.name] = "";
    } else if (from.fieldRef) {
      env[variable.name] = fieldRefValue(pod, from.fieldRef, addresses.podIp, addresses.hostIp);
    } else if (from.resourceFieldRef) {
      const target = from.resourceFieldRef.containerName
        ? pod.spec?.containers.find((c) => c.name === from.resourceFieldRef?.containerName)
        : container;
      env[variable.name] = resourceFieldValue(target, from.resourceFieldRef);
    } else if (from.secretKeyRef) {
      const ref = from.secretKeyRef;
      const data = await source.secretData(namespace, ref.name ?? "");
      const value = data?.[ref.key];
      if (value === undefined) {
        if (ref.optional) continue;
        throw new MissingReferenceError(
          data
            ? `couldn't find key ${ref.key} in Secret ${namespace}/${ref.name}`
            : `secret "${ref.name}" not found`,
        );
      }
      env[variable.name] = value.toString("utf8");
    } else if (from.configMapKeyRef) {
      const ref = from.configMapKeyRef;
      const data = await source.configMapData(namespace, ref.name ?? "");
      const value = data?.[ref.key];
      if (value === undefined) {
        if (ref.optional) continue;
        throw new MissingReferenceError(
          data
            ? `couldn't find key ${ref.key} in ConfigMap ${namespace}/${ref.name}`
            : `configmap "${ref.name}" not found`,
        );
      }
      env[variable.name] = value;
    }
  }
  return env;
}

/**
 * The argv a container runs, with Docker's rules: `command` replaces the image's ENTRYPOINT and
 * `args` its CMD (a `command` alone drops the CMD too); $(VAR) is expanded in both.
 */
export function containerArgv(
  container: V1Container,
  image: { entrypoint: string[]; cmd: string[] },
  env: Record<string, string>,
): string[] {
  const hasCommand = (container.command?.length ?? 0) > 0;
  const entrypoint = hasCommand ? (container.command ?? []) : image.entrypoint;
  const args = container.args ?? (hasCommand ? [] : image.cmd);
  return [...entrypoint, ...args].map((part) => expandVars(part, env));
}

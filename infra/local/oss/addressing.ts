// Which bucket and object a request is about. OSS is addressed virtual-host style: the bucket is
// the first label of the Host header (`<bucket>.oss-cn-hangzhou.aliyuncs.com`) and the path is
// the object key. ali-oss keeps that even when its endpoint is an IP address: it connects to the
// IP but sends `Host: <bucket>.<region host>` (lib/common/utils/createRequest.js), which is how
// the operator reaches this server (`endpoint: "http://10.x.y.z:PORT"`). A Host that is itself an
// address (an IP, localhost, a name without dots, or one of the server's own names) means path
// style instead: `/<bucket>/<key>`, as raw HTTP clients and tools usually send it.
import { isIP } from "node:net";
import { invalidUri } from "./errors.ts";

export interface RequestTarget {
  /** undefined for service-level requests (ListBuckets). */
  bucket: string | undefined;
  /** "" for bucket-level requests. */
  key: string;
  style: "virtual-host" | "path";
}

/** The Host header without its port, lower-cased; IPv6 brackets removed. */
export function hostName(hostHeader: string | undefined): string {
  const host = (hostHeader ?? "").trim().toLowerCase();
  if (host.startsWith("[")) return host.slice(1, host.indexOf("]") > 0 ? host.indexOf("]") : undefined);
  const colon = host.lastIndexOf(":");
  return colon >= 0 && host.indexOf(":") === colon ? host.slice(0, colon) : host;
}

/** OSS's own service endpoints (`oss-<region>[-internal].aliyuncs.com`) carry no bucket. */
const SERVICE_HOST = /^oss-[a-z0-9-]+\.aliyuncs\.com$/;

function decodePathPart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch (error) {
    throw Object.assign(invalidUri(), { cause: error });
  }
}

export function resolveTarget(
  hostHeader: string | undefined,
  rawPath: string,
  ownHostNames: ReadonlySet<string>,
): RequestTarget {
  const host = hostName(hostHeader);
  const path = rawPath.startsWith("/") ? rawPath.slice(1) : rawPath;
  const pathStyle =
    host === "" || isIP(host) !== 0 || host === "localhost" || !host.includes(".") || ownHostNames.has(host);
  if (pathStyle) {
    const slash = path.indexOf("/");
    const bucket = decodePathPart(slash < 0 ? path : path.slice(0, slash));
    const key = slash < 0 ? "" : decodePathPart(path.slice(slash + 1));
    return { bucket: bucket === "" ? undefined : bucket, key, style: "path" };
  }
  if (SERVICE_HOST.test(host)) return { bucket: undefined, key: decodePathPart(path), style: "virtual-host" };
  // ali-oss with an IP endpoint sends `Host: .oss-<region>...` (empty bucket) for ListBuckets.
  const bucket = host.slice(0, host.indexOf("."));
  return { bucket: bucket === "" ? undefined : bucket, key: decodePathPart(path), style: "virtual-host" };
}

/**
 * The query string as an ordered map of decoded names and values ("" for a name without "=").
 * `+` stays a plus sign: OSS clients percent-encode spaces, and the signatures are computed over
 * the decoded values, so URLSearchParams' form decoding would break them.
 */
export function parseQuery(rawQuery: string): Map<string, string> {
  const query = new Map<string, string>();
  for (const pair of rawQuery.split("&")) {
    if (pair === "") continue;
    const equals = pair.indexOf("=");
    const name = decodePathPart(equals < 0 ? pair : pair.slice(0, equals));
    const value = equals < 0 ? "" : decodePathPart(pair.slice(equals + 1));
    query.set(name, value);
  }
  return query;
}

/** The path and the raw query string of a request target (`/key?uploads`). */
export function splitRequestUrl(url: string | undefined): { path: string; rawQuery: string } {
  const target = url ?? "/";
  const question = target.indexOf("?");
  return question < 0
    ? { path: target, rawQuery: "" }
    : { path: target.slice(0, question), rawQuery: target.slice(question + 1) };
}

/** OSS bucket names: 3–63 characters, lower-case letters, digits and hyphens, no hyphen at either end. */
export function isValidBucketName(name: string): boolean {
  return /^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/.test(name);
}

/** Why OSS would refuse this object key, or undefined when it is fine. */
export function objectKeyProblem(key: string): string | undefined {
  const bytes = Buffer.byteLength(key, "utf8");
  if (bytes === 0 || bytes > 1023) return "The length of an object name must be between 1 and 1023 bytes.";
  if (key.startsWith("/") || key.startsWith("\\")) return "An object name must not start with / or \\.";
  return undefined;
}

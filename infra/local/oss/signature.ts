// Request authentication as OSS does it: signature V1 (`Authorization: OSS <AccessKeyId>:<Signature>`,
// HMAC-SHA1) and V4 (`Authorization: OSS4-HMAC-SHA256 Credential=…,Signature=…`, HMAC-SHA256 with a
// date/region scoped key). The server rebuilds the string to sign from what it received and
// compares; it never trusts anything the client says it signed. The client's clock must be within
// 15 minutes of the server's, so a captured request cannot be replayed later.
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import {
  accessDenied,
  invalidAccessKeyId,
  invalidArgument,
  requestTimeTooSkewed,
  signatureDoesNotMatch,
} from "./errors.ts";

export const MAX_CLOCK_SKEW_MS = 15 * 60 * 1000;

export interface SignedRequest {
  method: string;
  headers: IncomingHttpHeaders;
  bucket: string | undefined;
  key: string;
  query: ReadonlyMap<string, string>;
}

export interface SignatureContext {
  /** accessKeyId → accessKeySecret */
  secrets: ReadonlyMap<string, string>;
  /** The standard region V4 scopes must name, e.g. "cn-hangzhou". */
  region: string;
  now: Date;
  maxSkewMs: number;
}

/**
 * Query parameters that signature V1 includes in the canonicalized resource; every other
 * parameter (prefix, marker, max-keys, list-type, ...) is not signed in V1. The list is the one
 * OSS documents and its SDKs use.
 */
export const V1_SUBRESOURCES: ReadonlySet<string> = new Set([
  "acl",
  "uploads",
  "location",
  "cors",
  "logging",
  "website",
  "referer",
  "lifecycle",
  "delete",
  "append",
  "tagging",
  "objectMeta",
  "uploadId",
  "partNumber",
  "security-token",
  "position",
  "img",
  "style",
  "styleName",
  "replication",
  "replicationProgress",
  "replicationLocation",
  "cname",
  "bucketInfo",
  "comp",
  "qos",
  "live",
  "status",
  "vod",
  "startTime",
  "endTime",
  "symlink",
  "x-oss-process",
  "response-content-type",
  "response-content-language",
  "response-expires",
  "response-cache-control",
  "response-content-disposition",
  "response-content-encoding",
  "udf",
  "udfName",
  "udfImage",
  "udfId",
  "udfImageDesc",
  "udfApplication",
  "udfApplicationLog",
  "restore",
  "callback",
  "callback-var",
  "policy",
  "stat",
  "encryption",
  "versions",
  "versioning",
  "versionId",
  "requestPayment",
  "x-oss-request-payer",
  "sequential",
  "inventory",
  "inventoryId",
  "continuation-token",
  "asyncFetch",
  "worm",
  "wormId",
  "wormExtend",
  "x-oss-traffic-limit",
  "objectInfo",
  "qosInfo",
  "transferAcceleration",
  "metaQuery",
  "resourceGroup",
]);

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  if (value === undefined) return undefined;
  // Node hands header values over as latin1 strings; clients sign their UTF-8 text.
  return Buffer.from(Array.isArray(value) ? value.join(",") : value, "latin1").toString("utf8");
}

const byCodeUnits = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function sameText(expected: string, provided: string): boolean {
  const a = Buffer.from(expected);
  const b = Buffer.from(provided);
  return a.length === b.length && timingSafeEqual(a, b);
}

function checkClock(requestTime: number, raw: string, context: SignatureContext): void {
  if (Number.isNaN(requestTime)) throw accessDenied(`The request time "${raw}" is not a valid date.`);
  if (Math.abs(context.now.getTime() - requestTime) > context.maxSkewMs) {
    throw requestTimeTooSkewed(raw, context.now.toUTCString(), context.maxSkewMs);
  }
}

function secretFor(accessKeyId: string, context: SignatureContext): string {
  const secret = context.secrets.get(accessKeyId);
  if (secret === undefined) throw invalidAccessKeyId(accessKeyId);
  return secret;
}

// --- V1 ---------------------------------------------------------------------------------------

/** `/bucket/key?sub=value&sub2` with only the V1 sub-resources, sorted, values not encoded. */
export function v1CanonicalResource(request: SignedRequest): string {
  const resource = request.bucket === undefined ? "/" : `/${request.bucket}/${request.key}`;
  const signed = [...request.query]
    .filter(([name]) => V1_SUBRESOURCES.has(name))
    .sort(([a], [b]) => byCodeUnits(a, b))
    .map(([name, value]) => (value === "" ? name : `${name}=${value}`));
  return signed.length === 0 ? resource : `${resource}?${signed.join("&")}`;
}

/** VERB, Content-MD5, Content-Type, date, the x-oss-* headers sorted, the canonical resource. */
export function v1StringToSign(request: SignedRequest, dateLine: string): string {
  const ossHeaders = Object.keys(request.headers)
    .filter((name) => name.startsWith("x-oss-"))
    .sort(byCodeUnits)
    .map((name) => `${name}:${(header(request.headers, name) ?? "").trim()}`);
  return [
    request.method.toUpperCase(),
    header(request.headers, "content-md5") ?? "",
    header(request.headers, "content-type") ?? "",
    dateLine,
    ...ossHeaders,
    v1CanonicalResource(request),
  ].join("\n");
}

function verifyV1(authorization: string, request: SignedRequest, context: SignatureContext): string {
  const credential = authorization.slice("OSS ".length);
  const colon = credential.lastIndexOf(":");
  if (colon <= 0) throw invalidArgument("Authorization header is invalid.", "Authorization", "OSS");
  const accessKeyId = credential.slice(0, colon).trim();
  const provided = credential.slice(colon + 1).trim();
  const secret = secretFor(accessKeyId, context);
  // ali-oss signs x-oss-date (it sends no Date header); other clients sign Date.
  const dateLine = header(request.headers, "x-oss-date") ?? header(request.headers, "date");
  if (dateLine === undefined) throw accessDenied("The request has neither a Date nor an x-oss-date header.");
  checkClock(Date.parse(dateLine), dateLine, context);
  const stringToSign = v1StringToSign(request, dateLine);
  const expected = createHmac("sha1", secret).update(stringToSign, "utf8").digest("base64");
  if (!sameText(expected, provided)) throw signatureDoesNotMatch(accessKeyId, stringToSign);
  return accessKeyId;
}

// --- V4 ---------------------------------------------------------------------------------------

/** RFC 3986 percent-encoding (everything but A-Z a-z 0-9 - _ . ~), as OSS V4 requires. */
export function encodeRfc3986(text: string): string {
  return encodeURIComponent(text).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

interface V4Authorization {
  accessKeyId: string;
  scopeDate: string;
  region: string;
  product: string;
  additionalHeaders: string[];
  signature: string;
}

function parseV4Authorization(authorization: string): V4Authorization {
  const fields = new Map<string, string>();
  for (const part of authorization.slice("OSS4-HMAC-SHA256 ".length).split(",")) {
    const field = part.trim();
    const equals = field.indexOf("=");
    if (equals > 0) fields.set(field.slice(0, equals), field.slice(equals + 1));
  }
  const credential = (fields.get("Credential") ?? "").split("/");
  const signature = fields.get("Signature") ?? "";
  const [accessKeyId, scopeDate, region, product, terminator] = credential;
  if (
    credential.length !== 5 ||
    accessKeyId === undefined ||
    scopeDate === undefined ||
    region === undefined ||
    product === undefined ||
    terminator !== "aliyun_v4_request" ||
    signature === ""
  ) {
    throw invalidArgument("Authorization header is invalid.", "Authorization", "OSS4-HMAC-SHA256");
  }
  const additional = fields.get("AdditionalHeaders");
  const additionalHeaders = additional === undefined || additional === "" ? [] : additional.split(";");
  return { accessKeyId, scopeDate, region, product, additionalHeaders, signature };
}

/** yyyymmddTHHMMssZ → epoch ms (NaN when malformed). */
function parseIsoBasic(value: string): number {
  const match = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value);
  if (match === null) return Number.NaN;
  const [, year, month, day, hour, minute, second] = match.map(Number);
  if (year === undefined || month === undefined || day === undefined) return Number.NaN;
  return Date.UTC(year, month - 1, day, hour ?? 0, minute ?? 0, second ?? 0);
}

export function v4CanonicalRequest(request: SignedRequest, additionalHeaders: readonly string[]): string {
  const path = `/${request.bucket === undefined ? "" : `${request.bucket}/`}${request.key}`;
  const uri = encodeRfc3986(path).replaceAll("%2F", "/");
  const query = [...request.query]
    .map(([name, value]): [string, string] => [encodeRfc3986(name), value === "" ? "" : encodeRfc3986(value)])
    .sort(([a], [b]) => byCodeUnits(a, b))
    .map(([name, value]) => (value === "" ? name : `${name}=${value}`))
    .join("&");
  const signedHeaders = new Set(additionalHeaders);
  for (const name of Object.keys(request.headers)) {
    if (name === "content-type" || name === "content-md5" || name.startsWith("x-oss-"))
      signedHeaders.add(name);
  }
  const canonicalHeaders = [...signedHeaders]
    .sort(byCodeUnits)
    .map((name) => `${name}:${(header(request.headers, name) ?? "").trim()}\n`)
    .join("");
  return [
    request.method.toUpperCase(),
    uri,
    query,
    canonicalHeaders,
    additionalHeaders.join(";"),
    header(request.headers, "x-oss-content-sha256") ?? "",
  ].join("\n");
}

function v4SigningKey(secret: string, date: string, region: string, product: string): Buffer {
  const signingDate = createHmac("sha256", `aliyun_v4${secret}`).update(date).digest();
  const signingRegion = createHmac("sha256", signingDate).update(region).digest();
  const signingProduct = createHmac("sha256", signingRegion).update(product).digest();
  return createHmac("sha256", signingProduct).update("aliyun_v4_request").digest();
}

function verifyV4(authorization: string, request: SignedRequest, context: SignatureContext): string {
  const parsed = parseV4Authorization(authorization);
  const secret = secretFor(parsed.accessKeyId, context);
  const requestDate = header(request.headers, "x-oss-date");
  if (requestDate === undefined) throw accessDenied("V4 signed requests must carry an x-oss-date header.");
  checkClock(parseIsoBasic(requestDate), requestDate, context);
  if (parsed.scopeDate !== requestDate.slice(0, 8)) {
    throw accessDenied("The date in the credential scope does not match x-oss-date.");
  }
  if (parsed.region !== context.region || parsed.product !== "oss") {
    throw accessDenied(
      `Invalid signing region or product in Authorization header: expected ${context.region}/oss, got ${parsed.region}/${parsed.product}.`,
    );
  }
  if (header(request.headers, "x-oss-content-sha256") === undefined) {
    throw accessDenied("V4 signed requests must carry an x-oss-content-sha256 header.");
  }
  for (const name of parsed.additionalHeaders) {
    if (name !== name.toLowerCase() || request.headers[name] === undefined) {
      throw accessDenied(`The additional signed header "${name}" is not in the request.`);
    }
  }
  const canonicalRequest = v4CanonicalRequest(request, parsed.additionalHeaders);
  const scope = `${parsed.scopeDate}/${parsed.region}/${parsed.product}/aliyun_v4_request`;
  const stringToSign = [
    "OSS4-HMAC-SHA256",
    requestDate,
    scope,
    createHash("sha256").update(canonicalRequest, "utf8").digest("hex"),
  ].join("\n");
  const key = v4SigningKey(secret, parsed.scopeDate, parsed.region, parsed.product);
  const expected = createHmac("sha256", key).update(stringToSign, "utf8").digest("hex");
  if (!sameText(expected, parsed.signature)) {
    throw signatureDoesNotMatch(parsed.accessKeyId, stringToSign, { CanonicalRequest: canonicalRequest });
  }
  return parsed.accessKeyId;
}

/** The access key id of a correctly signed request; throws the OssError OSS would answer with. */
export function authenticate(request: SignedRequest, context: SignatureContext): string {
  const authorization = header(request.headers, "authorization");
  if (authorization === undefined || authorization.trim() === "") {
    // Buckets here are private: an anonymous request has no right to anything.
    throw accessDenied("You have no right to access this object because of bucket acl.");
  }
  if (authorization.startsWith("OSS4-HMAC-SHA256 ")) return verifyV4(authorization, request, context);
  if (authorization.startsWith("OSS ")) return verifyV1(authorization, request, context);
  throw invalidArgument(
    "Authorization header is invalid.",
    "Authorization",
    authorization.split(" ")[0] ?? "",
  );
}

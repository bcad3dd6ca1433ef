// PutObject, GetObject (Range, conditions, response-* overrides), HeadObject, GetObjectMeta,
// DeleteObject and DeleteMultipleObjects. Object data only ever moves as a stream between the
// socket and a file.

import { createReadStream } from "node:fs";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { type BodyExpectations, contentLength, MAX_SINGLE_UPLOAD_BYTES, receiveBody } from "./body.ts";
import { invalidArgument, invalidRange, malformedXml, notImplemented, preconditionFailed } from "./errors.ts";
import { type Exchange, header, type OssBackend, readSmallBody, sendEmpty, sendXml } from "./exchange.ts";
import { partEtag } from "./multipart.ts";
import { decideRange } from "./ranges.ts";
import { newVersion, type Segment, type StoredObject } from "./store.ts";
import { elementsNamed, firstText, type XmlElement } from "./xml.ts";

/** Standard headers OSS keeps with an object and returns on GET/HEAD. */
const KEPT_HEADERS = [
  "content-type",
  "cache-control",
  "content-disposition",
  "content-encoding",
  "content-language",
  "expires",
];

/** OSS limits the x-oss-meta-* headers of one object to 8 KiB in total. */
export const MAX_USER_METADATA_BYTES = 8 * 1024;

/** GET query parameters that override response headers, as OSS supports them. */
const RESPONSE_OVERRIDES: Readonly<Record<string, string>> = {
  "response-content-type": "content-type",
  "response-content-language": "content-language",
  "response-expires": "expires",
  "response-cache-control": "cache-control",
  "response-content-disposition": "content-disposition",
  "response-content-encoding": "content-encoding",
};

export const RESPONSE_OVERRIDE_PARAMETERS: readonly string[] = Object.keys(RESPONSE_OVERRIDES);

const MAX_DELETE_BODY_BYTES = 2 * 1024 * 1024;
const MAX_KEYS_PER_DELETE = 1000;

/** The headers stored with a new object: the kept standard ones and the user metadata. */
export function headersToStore(req: IncomingMessage): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const name of KEPT_HEADERS) {
    const value = header(req, name);
    if (value !== undefined && value !== "") kept[name] = value;
  }
  kept["content-type"] ??= "application/octet-stream";
  let metadataBytes = 0;
  for (const name of Object.keys(req.headers)) {
    if (!name.startsWith("x-oss-meta-")) continue;
    const value = header(req, name) ?? "";
    kept[name] = value;
    metadataBytes += name.length + value.length;
  }
  if (metadataBytes > MAX_USER_METADATA_BYTES) {
    throw invalidArgument(
      "Your metadata headers exceed the maximum allowed metadata size.",
      "x-oss-meta-*",
      String(metadataBytes),
    );
  }
  return kept;
}

export function bodyExpectations(req: IncomingMessage, maxBytes: number): BodyExpectations {
  return {
    maxBytes,
    declaredLength: contentLength(header(req, "content-length")),
    contentMd5: header(req, "content-md5"),
    contentSha256: header(req, "x-oss-content-sha256"),
  };
}

/** The headers GET and HEAD answer with (lower-case names, so overrides replace, never duplicate). */
function objectHeaders(object: StoredObject): Record<string, string> {
  const headers: Record<string, string> = {
    ...object.headers,
    etag: object.etag,
    "last-modified": new Date(object.lastModified).toUTCString(),
    "accept-ranges": "bytes",
    "x-oss-object-type": object.type,
    "x-oss-storage-class": "Standard",
  };
  if (object.contentMd5 !== undefined) headers["content-md5"] = object.contentMd5;
  return headers;
}

function etagListMatches(list: string, etag: string): boolean {
  if (list.trim() === "*") return true;
  return list.split(",").some((candidate) => candidate.trim() === etag);
}

/** HTTP conditions: 412 for a failed If-Match/If-Unmodified-Since, "not-modified" for a 304. */
function evaluateConditions(req: IncomingMessage, object: StoredObject): "not-modified" | undefined {
  // HTTP dates have whole seconds.
  const modified = Math.floor(Date.parse(object.lastModified) / 1000) * 1000;
  const ifMatch = header(req, "if-match");
  if (ifMatch !== undefined && !etagListMatches(ifMatch, object.etag)) throw preconditionFailed("If-Match");
  const ifUnmodifiedSince = Date.parse(header(req, "if-unmodified-since") ?? "");
  if (!Number.isNaN(ifUnmodifiedSince) && modified > ifUnmodifiedSince) {
    throw preconditionFailed("If-Unmodified-Since");
  }
  const ifNoneMatch = header(req, "if-none-match");
  if (ifNoneMatch !== undefined)
    return etagListMatches(ifNoneMatch, object.etag) ? "not-modified" : undefined;
  const ifModifiedSince = Date.parse(header(req, "if-modified-since") ?? "");
  if (!Number.isNaN(ifModifiedSince) && modified <= ifModifiedSince) return "not-modified";
  return undefined;
}

/** Bytes start..end (inclusive) of an object stored as consecutive segment files. */
async function* readSegments(
  paths: readonly string[],
  segments: readonly Segment[],
  start: number,
  end: number,
) {
  let offset = 0;
  for (const [index, segment] of segments.entries()) {
    const first = offset;
    const last = offset + segment.size - 1;
    offset += segment.size;
    const path = paths[index];
    if (path === undefined || segment.size === 0 || last < start || first > end) continue;
    yield* createReadStream(path, {
      start: Math.max(start, first) - first,
      end: Math.min(end, last) - first,
    });
  }
}

export async function putObject(x: Exchange, backend: OssBackend): Promise<void> {
  if (header(x.req, "x-oss-copy-source") !== undefined) throw notImplemented("CopyObject");
  const headers = headersToStore(x.req);
  // Refuse before reading a possibly huge body into a bucket that does not exist.
  await backend.store.bucket(x.bucket);
  const received = await receiveBody(
    x.req,
    backend.store.tempPath(),
    bodyExpectations(x.req, MAX_SINGLE_UPLOAD_BYTES),
  );
  const segment = await backend.store.adoptFile(
    x.bucket,
    x.key,
    received.path,
    newVersion(),
    0,
    received.size,
  );
  const object = await backend.store.commit(x.bucket, {
    key: x.key,
    size: received.size,
    etag: partEtag(received.md5),
    contentMd5: received.md5.toString("base64"),
    lastModified: new Date().toISOString(),
    type: "Normal",
    headers,
    segments: [segment],
  });
  sendEmpty(x.res, 200, { etag: object.etag, "content-md5": object.contentMd5 ?? "" });
}

/** GetObject (withBody) and HeadObject. */
export async function getObject(x: Exchange, backend: OssBackend, withBody: boolean): Promise<void> {
  await backend.store.bucket(x.bucket);
  const opened = await backend.store.open(x.bucket, x.key);
  try {
    const { object } = opened;
    const headers = objectHeaders(object);
    if (evaluateConditions(x.req, object) === "not-modified") {
      sendEmpty(x.res, 304, { etag: object.etag, "last-modified": headers["last-modified"] ?? "" });
      return;
    }
    const range = header(x.req, "range");
    const decision = decideRange(range, object.size, header(x.req, "x-oss-range-behavior") === "standard");
    if (decision.kind === "unsatisfiable") throw invalidRange(range ?? "", object.size);
    if (withBody) {
      for (const [parameter, name] of Object.entries(RESPONSE_OVERRIDES)) {
        const value = x.query.get(parameter);
        if (value !== undefined) headers[name] = value;
      }
    }
    const partial = decision.kind === "partial";
    const start = partial ? decision.start : 0;
    const end = partial ? decision.end : object.size - 1;
    if (partial) headers["content-range"] = `bytes ${start}-${end}/${object.size}`;
    headers["content-length"] = String(Math.max(0, end - start + 1));
    x.res.writeHead(partial ? 206 : 200, headers);
    if (!withBody) {
      x.res.end();
      return;
    }
    await pipeline(Readable.from(readSegments(opened.paths, object.segments, start, end)), x.res);
  } finally {
    opened.release();
  }
}

/** GetObjectMeta (HEAD ?objectMeta): the basic facts without the object's own headers. */
export async function getObjectMeta(x: Exchange, backend: OssBackend): Promise<void> {
  await backend.store.bucket(x.bucket);
  const object = await backend.store.stat(x.bucket, x.key);
  x.res.writeHead(200, {
    etag: object.etag,
    "content-length": String(object.size),
    "last-modified": new Date(object.lastModified).toUTCString(),
  });
  x.res.end();
}

export async function deleteObject(x: Exchange, backend: OssBackend): Promise<void> {
  await backend.store.bucket(x.bucket);
  await backend.store.delete(x.bucket, x.key);
  sendEmpty(x.res, 204);
}

/** POST /?delete with <Delete><Quiet/><Object><Key/></Object>…</Delete>. */
export async function deleteMultipleObjects(x: Exchange, backend: OssBackend): Promise<void> {
  const xml = await readSmallBody(x.req, MAX_DELETE_BODY_BYTES);
  const [document] = elementsNamed(xml, "Delete");
  if (document === undefined) throw malformedXml();
  const quiet = (firstText(document, "Quiet") ?? "").trim().toLowerCase() === "true";
  const keys: string[] = [];
  for (const object of elementsNamed(document, "Object")) {
    const key = firstText(object, "Key");
    if (key === undefined || key === "") throw malformedXml();
    keys.push(key);
  }
  if (keys.length === 0 || keys.length > MAX_KEYS_PER_DELETE) throw malformedXml();
  await backend.store.bucket(x.bucket);
  const deleted: XmlElement[] = [];
  for (const key of keys) {
    await backend.store.delete(x.bucket, key);
    if (!quiet) deleted.push(["Deleted", [["Key", key]]]);
  }
  sendXml(x.res, 200, ["DeleteResult", deleted]);
}

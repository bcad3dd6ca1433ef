// What every handler gets: the request as the router resolved it, the backend, and the helpers
// that answer the way OSS does (XML documents, empty answers, request bodies that are small XML).
import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "../../../shared/log.ts";
import { parseContentMd5 } from "./body.ts";
import { entityTooLarge, invalidDigest, type OssError, renderError } from "./errors.ts";
import type { MultipartUploads } from "./multipart.ts";
import type { ObjectStore } from "./store.ts";
import { renderXmlDocument, type XmlElement } from "./xml.ts";

export interface OssBackend {
  store: ObjectStore;
  uploads: MultipartUploads;
  /** Standard region, e.g. "cn-hangzhou"; OSS names it "oss-cn-hangzhou" in locations. */
  region: string;
  owner: { id: string; displayName: string };
  log: Logger;
}

export interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  method: string;
  bucket: string;
  key: string;
  query: ReadonlyMap<string, string>;
  requestId: string;
  /** The Host the client addressed, echoed in Location and HostId as OSS does. */
  host: string;
}

export function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(",") : value;
}

export function sendXml(
  res: ServerResponse,
  status: number,
  root: XmlElement,
  headers: Record<string, string> = {},
): void {
  const body = Buffer.from(renderXmlDocument(root), "utf8");
  res.writeHead(status, { ...headers, "Content-Type": "application/xml", "Content-Length": body.length });
  res.end(body);
}

export function sendEmpty(res: ServerResponse, status: number, headers: Record<string, string> = {}): void {
  res.writeHead(status, { ...headers, "Content-Length": 0 });
  res.end();
}

/** A small request body (an XML document), bounded, checked against Content-MD5 when given. */
export async function readSmallBody(req: IncomingMessage, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk));
    size += buffer.length;
    if (size > limit) throw entityTooLarge(limit);
    chunks.push(buffer);
  }
  const body = Buffer.concat(chunks);
  const contentMd5 = header(req, "content-md5");
  if (contentMd5 !== undefined) {
    const calculated = createHash("md5").update(body).digest();
    if (!calculated.equals(parseContentMd5(contentMd5))) {
      throw invalidDigest(contentMd5, calculated.toString("base64"));
    }
  }
  return body.toString("utf8");
}

/** A non-negative integer query parameter within [min, max], or the default when absent. */
export function integerParameter(
  query: ReadonlyMap<string, string>,
  name: string,
  fallback: number,
  min: number,
  max: number,
  invalid: (value: string) => Error,
): number {
  const value = query.get(name);
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) throw invalid(value);
  const number = Number(value);
  if (number < min || number > max) throw invalid(value);
  return number;
}

/** `oss-cn-hangzhou`: how OSS names a region in bucket locations. */
export const locationOf = (region: string) => `oss-${region}`;

/**
 * An OSS error answer: the XML document, or for HEAD (which has no body) the same document
 * base64-encoded in the x-oss-err header, which is where ali-oss looks for it.
 */
export function sendError(
  res: ServerResponse,
  method: string,
  error: OssError,
  requestId: string,
  hostId: string,
): void {
  const xml = renderError(error, requestId, hostId);
  if (method === "HEAD") {
    res.writeHead(error.status, {
      "x-oss-err": Buffer.from(xml, "utf8").toString("base64"),
      "content-length": 0,
    });
    res.end();
    return;
  }
  const body = Buffer.from(xml, "utf8");
  res.writeHead(error.status, { "content-type": "application/xml", "content-length": body.length });
  res.end(body);
}

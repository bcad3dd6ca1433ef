// Requests to a member's HTTP endpoints (/version, and etcd's gRPC gateway for Status), with the
// same TLS options as the gRPC client:
// with client TLS the member wants the operator's client certificate and serves a certificate for
// its DNS names while we dial its IP, so the name is checked against `serverName` instead.
import { request } from "node:https";
import { checkServerIdentity } from "node:tls";
import { Agent, request as undiciRequest } from "undici";
import { DEFAULT_ETCD_TIMEOUT_MS, type EtcdClientOptions } from "./etcd-options.ts";

/**
 * Kept-alive connections to members over plain HTTP, for every cluster. undici's request() rather
 * than the global fetch(): a steady reconcile asks each member for its Status, the member list and
 * the version, and fetch's WHATWG streams cost several times the CPU per call; it also loaded
 * Node's own copy of undici beside the one the operator already uses for kube-apiserver.
 */
const plainMembers = new Agent({ keepAliveTimeout: 4_000 });

/** The plain-HTTP path of fetchMemberJson; a timeout throws the signal's TimeoutError, as fetch did. */
async function plainJson(url: string, method: string, payload: string | undefined, timeoutMs: number) {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const response = await undiciRequest(url, {
      method,
      body: payload,
      headers: payload === undefined ? undefined : { "content-type": "application/json" },
      signal,
      dispatcher: plainMembers,
    });
    if (response.statusCode < 200 || response.statusCode >= 300) {
      const text = await response.body.text();
      throw new Error(`${method} ${url}: HTTP ${response.statusCode}: ${text.slice(0, 300)}`);
    }
    return await response.body.json();
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    throw error;
  }
}

/**
 * GETs `url` from a member (or POSTs `body` as JSON: etcd's gRPC gateway, /v3/...) and parses the
 * answer; throws on a non-2xx status, a timeout or a body that is not JSON.
 */
export async function fetchMemberJson(
  url: string,
  options: EtcdClientOptions,
  body?: object,
): Promise<unknown> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_ETCD_TIMEOUT_MS;
  const tls = options.tls;
  const method = body === undefined ? "GET" : "POST";
  const payload = body === undefined ? undefined : JSON.stringify(body);
  if (!tls) return plainJson(url, method, payload, timeoutMs);
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: target.hostname,
        port: target.port,
        path: `${target.pathname}${target.search}`,
        method,
        ca: tls.ca,
        cert: tls.cert,
        key: tls.key,
        servername: tls.serverName,
        // Checked against serverName, not the IP we dial.
        checkServerIdentity: (host, cert) => checkServerIdentity(tls.serverName ?? host, cert),
        timeout: timeoutMs,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => {
          const status = response.statusCode ?? 0;
          if (status < 200 || status >= 300) {
            const text = Buffer.concat(chunks).toString("utf8").slice(0, 300);
            reject(new Error(`${method} ${url}: HTTP ${status}: ${text}`));
            return;
          }
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")));
          } catch (error) {
            reject(new Error(`${url} answered no JSON`, { cause: error }));
          }
        });
        response.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${url} timed out after ${timeoutMs} ms`)));
    req.on("error", (error) => reject(new Error(`${method} ${url} failed`, { cause: error })));
    req.end(payload);
  });
}

/** etcd's cluster version from a member's /version endpoint ({"etcdcluster": "3.6.0"}). */
export async function fetchClusterVersion(
  endpoint: string,
  options: EtcdClientOptions,
): Promise<string | undefined> {
  try {
    const body = (await fetchMemberJson(`${endpoint}/version`, options)) as { etcdcluster?: string };
    return body.etcdcluster && body.etcdcluster !== "not_decided" ? body.etcdcluster : undefined;
  } catch {
    return undefined;
  }
}

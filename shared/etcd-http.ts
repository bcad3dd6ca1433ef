// GETs on a member's HTTP endpoints (/version), with the same TLS options as the gRPC client:
// with client TLS the member wants the operator's client certificate and serves a certificate for
// its DNS names while we dial its IP, so the name is checked against `serverName` instead.
import { request } from "node:https";
import { checkServerIdentity } from "node:tls";
import { DEFAULT_ETCD_TIMEOUT_MS, type EtcdClientOptions } from "./etcd-members.ts";

export async function fetchMemberJson(url: string, options: EtcdClientOptions): Promise<unknown> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_ETCD_TIMEOUT_MS;
  const tls = options.tls;
  if (!tls) {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    return response.json();
  }
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: target.hostname,
        port: target.port,
        path: `${target.pathname}${target.search}`,
        method: "GET",
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
    req.on("error", (error) => reject(new Error(`GET ${url} failed`, { cause: error })));
    req.end();
  });
}

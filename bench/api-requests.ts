// kube-apiserver's own count of the requests it served, read from its /metrics: what a bench's
// operator asked of the API server in a phase (the difference of two readings).
import { request } from "node:https";
import type { KubeConfig } from "@kubernetes/client-node";

/** Requests served so far, by "VERB resource[/subresource]". */
export async function apiRequestCounts(kc: KubeConfig): Promise<Map<string, number>> {
  const server = kc.getCurrentCluster();
  const user = kc.getCurrentUser();
  const b64 = (data: string | undefined) => (data ? Buffer.from(data, "base64") : undefined);
  const text = await new Promise<string>((resolve, reject) => {
    const req = request(
      `${server?.server}/metrics`,
      { ca: b64(server?.caData), cert: b64(user?.certData), key: b64(user?.keyData) },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          body += chunk;
        });
        res.on("end", () => resolve(body));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
  const counts = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line.startsWith("apiserver_request_total{")) continue;
    const verb = /verb="([^"]*)"/.exec(line)?.[1] ?? "";
    const resource = /resource="([^"]*)"/.exec(line)?.[1] ?? "";
    const subresource = /subresource="([^"]*)"/.exec(line)?.[1];
    const key = `${verb} ${resource}${subresource ? `/${subresource}` : ""}`;
    counts.set(key, (counts.get(key) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
  return counts;
}

/**
 * Requests between two readings, by kind, divided by `per` (1: the counts themselves) and rounded
 * to two decimals; kinds under 0.01 are left out.
 */
export function countsSince(
  before: Map<string, number>,
  after: Map<string, number>,
  per = 1,
): Record<string, number> {
  return Object.fromEntries(
    [...after]
      .map(([key, n]): [string, number] => [key, (n - (before.get(key) ?? 0)) / per])
      .filter(([, n]) => n >= 0.01)
      .map(([key, n]) => [key, Number(n.toFixed(2))]),
  );
}

// A lean JSON GET against the API server, for the reads a reconcile makes on every run.
//
// Why not client-node's generated API for these: a reconcile of a quiet cluster is little more than
// one GET of its EtcdCluster, and `bench/control.ts` measured client-node's path (undici's fetch
// over HTTP/2, its middleware and ObjectSerializer) at 0.7–0.9 ms of worker CPU per GET, against
// 0.25–0.33 ms for undici's `request` over a kept-alive HTTP/1.1 connection; kube-apiserver
// itself spent ~0.2 ms less per request over HTTP/1.1. Custom objects come back as plain JSON
// either way (client-node does not convert them), so nothing is lost in the result.
//
// Credentials and TLS come from the same KubeConfig (`applyToHTTPSOptions`, which also refreshes
// tokens from exec plugins and token files). Kubeconfigs that go through a proxy use client-node's
// path instead: `KubeJsonReader.for` returns undefined for them.
import type { RequestOptions } from "node:https";
import type { KubeConfig } from "@kubernetes/client-node";
import { Agent, request } from "undici";
import { DISPATCHER_MAX_AGE_MS } from "./kube-config.ts";

/** An API error with its HTTP status in `code`, as client-node's ApiException has it (httpStatusOf). */
export class KubeHttpError extends Error {
  override name = "KubeHttpError";
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

function headersOf(options: RequestOptions): Record<string, string> {
  const headers: Record<string, string> = { accept: "application/json" };
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    if (typeof value === "string") headers[name] = value;
    else if (typeof value === "number") headers[name] = String(value);
  }
  return headers;
}

export class KubeJsonReader {
  private agent: Agent | undefined;
  private agentCreatedAt = 0;
  private readonly kc: KubeConfig;
  private readonly server: string;

  private constructor(kc: KubeConfig, server: string) {
    this.kc = kc;
    this.server = server;
  }

  /** A reader for this kubeconfig's cluster, or undefined when it needs client-node's proxy support. */
  static for(kc: KubeConfig): KubeJsonReader | undefined {
    const cluster = kc.getCurrentCluster();
    if (!cluster || cluster.proxyUrl || !cluster.server.startsWith("https://")) return undefined;
    return new KubeJsonReader(kc, cluster.server.replace(/\/+$/, ""));
  }

  /** GETs `path` (with its query) and parses the body; undefined on 404, KubeHttpError otherwise. */
  async get(path: string): Promise<unknown> {
    const options: RequestOptions = {};
    await this.kc.applyToHTTPSOptions(options);
    // One agent, renewed as PooledKubeConfig renews client-node's (shared/kube-config.ts): a
    // client certificate from an exec plugin rotates, and a kept connection would hold the old one.
    if (this.agent && Date.now() - this.agentCreatedAt >= DISPATCHER_MAX_AGE_MS) {
      // Requests in flight on the old one finish; close() waits for them.
      void this.agent.close().catch(() => {});
      this.agent = undefined;
    }
    if (!this.agent) this.agentCreatedAt = Date.now();
    this.agent ??= new Agent({
      allowH2: false,
      connect: {
        ca: options.ca,
        cert: options.cert,
        key: options.key,
        servername: options.servername,
        rejectUnauthorized: options.rejectUnauthorized,
        keepAlive: true,
        keepAliveInitialDelay: 30_000,
      },
    });
    const response = await request(`${this.server}${path}`, {
      dispatcher: this.agent,
      headers: headersOf(options),
    });
    if (response.statusCode === 404) {
      await response.body.dump();
      return undefined;
    }
    if (response.statusCode >= 300) {
      const text = await response.body.text();
      let message = text.slice(0, 500);
      try {
        const status = JSON.parse(text) as { message?: unknown };
        if (typeof status.message === "string") message = status.message;
      } catch {
        // Not a Status object: keep the text.
      }
      throw new KubeHttpError(response.statusCode, `GET ${path}: HTTP ${response.statusCode}: ${message}`);
    }
    return response.body.json();
  }

  async close(): Promise<void> {
    await this.agent?.close();
  }
}

// One probe attempt (httpGet, tcpSocket, exec), as the kubelet's prober runs them: HTTP succeeds
// on 200-399, TCP on an accepted connection, exec on exit code 0; each bounded by timeoutSeconds.
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { createConnection } from "node:net";
import type { V1Container, V1Probe } from "@kubernetes/client-node";

export interface ProbeResult {
  ok: boolean;
  message: string;
}

export type ExecInContainer = (
  command: string[],
  timeoutMs: number,
) => Promise<{ exitCode: number; stdout: string; stderr: string; timedOut: boolean }>;

function resolvePort(port: number | string, container: V1Container): number {
  if (typeof port === "number") return port;
  if (/^\d+$/.test(port)) return Number(port);
  const named = container.ports?.find((p) => p.name === port);
  if (!named) throw new Error(`probe names port "${port}", which the container does not declare`);
  return named.containerPort;
}

function httpProbe(url: URL, headers: Record<string, string>, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const request = url.protocol === "https:" ? httpsRequest : httpRequest;
    const req = request(
      url,
      { method: "GET", headers, timeout: timeoutMs, rejectUnauthorized: false },
      (res) => {
        res.resume();
        const status = res.statusCode ?? 0;
        resolve({
          ok: status >= 200 && status < 400,
          message: `HTTP probe failed with statuscode: ${status}`,
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`context deadline exceeded (Client.Timeout exceeded)`)));
    req.on("error", (error) => resolve({ ok: false, message: `Get "${url.href}": ${error.message}` }));
    req.end();
  });
}

function tcpProbe(host: string, port: number, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    const socket = createConnection({ host, port });
    const done = (result: ProbeResult) => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(timeoutMs, () => done({ ok: false, message: `dial tcp ${host}:${port}: i/o timeout` }));
    socket.on("connect", () => done({ ok: true, message: "" }));
    socket.on("error", (error) => done({ ok: false, message: `dial tcp ${host}:${port}: ${error.message}` }));
  });
}

export async function runProbe(
  probe: V1Probe,
  container: V1Container,
  podIp: string,
  exec: ExecInContainer,
): Promise<ProbeResult> {
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
  try {
    if (probe.httpGet) {
      const get = probe.httpGet;
      const scheme = (get.scheme ?? "HTTP").toLowerCase();
      const host = get.host || podIp;
      const path = get.path?.startsWith("/") ? get.path : `/${get.path ?? ""}`;
      const url = new URL(`${scheme}://${host}:${resolvePort(get.port, container)}${path}`);
      const headers = Object.fromEntries((get.httpHeaders ?? []).map((h) => [h.name, h.value]));
      return await httpProbe(url, headers, timeoutMs);
    }
    if (probe.tcpSocket) {
      return await tcpProbe(
        probe.tcpSocket.host || podIp,
        resolvePort(probe.tcpSocket.port, container),
        timeoutMs,
      );
    }
    if (probe.exec) {
      const result = await exec(probe.exec.command ?? [], timeoutMs);
      if (result.timedOut) return { ok: false, message: `command timed out after ${timeoutMs / 1000}s` };
      const output = `${result.stdout}${result.stderr}`.trim();
      return { ok: result.exitCode === 0, message: output || `command exited with ${result.exitCode}` };
    }
    if (probe.grpc) {
      // No gRPC health client here; an accepted connection is the closest honest check.
      return await tcpProbe(podIp, probe.grpc.port, timeoutMs);
    }
    return { ok: false, message: "probe has no handler" };
  } catch (error) {
    return { ok: false, message: error instanceof Error ? error.message : String(error) };
  }
}

/**
 * When a probe that was due at `dueAt` and ran at `now` runs next: on a grid of periods from the
 * first probe, as the kubelet's probe ticker ticks. A late probe (the sync loop was busy) does not
 * push the ones after it back, and ticks missed meanwhile are dropped, not run in a burst.
 */
export function nextProbeAt(dueAt: number, now: number, periodMs: number): number {
  return dueAt + Math.max(1, Math.floor((now - dueAt) / periodMs) + 1) * periodMs;
}

// A container's termination message, as the kubelet gives it: the container writes it to
// terminationMessagePath (default /dev/termination-log, a per-container file bind-mounted there),
// and the kubelet copies at most 4096 bytes into the container's terminated state. With
// terminationMessagePolicy FallbackToLogsOnError, a failed container that wrote nothing gets the
// tail of its log instead (the last 80 lines, at most 2048 bytes), as kubelet's
// kuberuntime_container.go does.
import { closeSync, mkdirSync, openSync, readSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { V1Container } from "@kubernetes/client-node";

export const DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log";
const MESSAGE_MAX_BYTES = 4096;
const LOG_TAIL_MAX_BYTES = 2048;
const LOG_TAIL_MAX_LINES = 80;

/** The mount for one run of a container: a fresh empty file on the host, the spec's path inside. */
export function terminationMessageMount(
  podDir: string,
  spec: V1Container,
  run: number,
): { source: string; target: string; readOnly: boolean } {
  const source = join(podDir, "termination", `${spec.name}-${run}`);
  mkdirSync(dirname(source), { recursive: true });
  writeFileSync(source, "");
  return { source, target: spec.terminationMessagePath || DEFAULT_TERMINATION_MESSAGE_PATH, readOnly: false };
}

/** At most `maxBytes` of the file, from its start or its end; "" when it is missing. */
function readBounded(file: string, maxBytes: number, from: "start" | "end"): string {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch {
    return "";
  }
  try {
    const size = statSync(file).size;
    const length = Math.min(size, maxBytes);
    const buffer = Buffer.alloc(length);
    const read = readSync(fd, buffer, 0, length, from === "end" ? size - length : 0);
    return buffer.subarray(0, read).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/** What the terminated state's `message` says, or undefined when there is nothing to say. */
export function terminationMessage(
  spec: V1Container,
  messageFile: string,
  logFile: string,
  exitCode: number,
): string | undefined {
  const written = readBounded(messageFile, MESSAGE_MAX_BYTES, "start");
  if (written) return written;
  if (spec.terminationMessagePolicy !== "FallbackToLogsOnError" || exitCode === 0) return undefined;
  const lines = readBounded(logFile, LOG_TAIL_MAX_BYTES, "end").split("\n");
  if (lines.at(-1) === "") lines.pop();
  const tail = lines.slice(-LOG_TAIL_MAX_LINES).join("\n");
  return tail || undefined;
}

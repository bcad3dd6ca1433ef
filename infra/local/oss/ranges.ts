// The Range header as OSS reads it. By default OSS is lenient: a range it cannot satisfy exactly
// (past the end, start after end, several ranges, bad syntax) is ignored and the whole object is
// returned with 200. With `x-oss-range-behavior: standard` it follows RFC 7233 instead: an end past
// the object is clamped, and a start past the end is 416 InvalidRange.

export type RangeDecision =
  | { kind: "whole" }
  | { kind: "partial"; start: number; end: number }
  | { kind: "unsatisfiable" };

export function decideRange(header: string | undefined, size: number, standard: boolean): RangeDecision {
  if (header === undefined) return { kind: "whole" };
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (match === null || (match[1] === "" && match[2] === "")) return { kind: "whole" };
  const first = match[1] ?? "";
  const second = match[2] ?? "";
  if (first === "") {
    // bytes=-N: the last N bytes.
    const length = Number(second);
    if (length === 0) return standard ? { kind: "unsatisfiable" } : { kind: "whole" };
    if (length > size && !standard) return { kind: "whole" };
    return size === 0
      ? { kind: "unsatisfiable" }
      : { kind: "partial", start: Math.max(0, size - length), end: size - 1 };
  }
  const start = Number(first);
  const end = second === "" ? size - 1 : Number(second);
  if (start >= size) return standard ? { kind: "unsatisfiable" } : { kind: "whole" };
  if (end < start) return { kind: "whole" };
  if (end >= size) return standard ? { kind: "partial", start, end: size - 1 } : { kind: "whole" };
  return { kind: "partial", start, end };
}

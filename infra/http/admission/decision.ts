// What an admission review decides, and small helpers the reviews share. The reviews are pure:
// they get the objects (and what the webhook looked up, e.g. the versions member pods run) and
// return allowed or refused with sentences a person can act on.

export interface Decision {
  allowed: boolean;
  /** Why it was refused: one sentence per problem, joined with "; ". */
  message?: string;
  /** Shown by kubectl as "Warning: …" even when allowed. */
  warnings: string[];
}

export function allow(warnings: string[] = []): Decision {
  return { allowed: true, warnings };
}

export function decide(problems: string[], warnings: string[] = []): Decision {
  return problems.length === 0 ? allow(warnings) : { allowed: false, message: problems.join("; "), warnings };
}

export type Json = Record<string, unknown>;

export function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function recordAt(value: unknown, key: string): Json | undefined {
  if (!isRecord(value)) return undefined;
  const inner = value[key];
  return isRecord(inner) ? inner : undefined;
}

/** JSON with object keys sorted, so two values compare equal however their keys were ordered. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (isRecord(value)) {
    const keys = Object.keys(value)
      .filter((k) => value[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

export function show(value: unknown): string {
  return typeof value === "string" ? JSON.stringify(value) : (JSON.stringify(value) ?? String(value));
}

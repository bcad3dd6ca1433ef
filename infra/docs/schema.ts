// A JSON Schema node as the documentation generators read it: an object whose keys they look at
// one by one, each checked before use (CRDs and values.schema.json arrive as parsed, untyped data).

export type Schema = Record<string, unknown>;

export function isSchema(value: unknown): value is Schema {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

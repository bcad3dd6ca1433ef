// The parameters of a Helm chart as a flat list: every leaf of values.yaml (and every section a
// comment or the schema describes) with its type, default, what values.schema.json allows and its
// description, taken from the comment above it in values.yaml or else from the schema.
// infra/docs/chart-values.ts renders them into docs/install.md.
import { readFileSync } from "node:fs";
import { isMap, isNode, isPair, isScalar, isSeq, type Pair, parseDocument, YAMLMap } from "yaml";
import { isSchema, type Schema } from "./schema.ts";

export interface ValueField {
  /** Dotted path as `--set` takes it, e.g. `replicas.http`. */
  path: string;
  type: string;
  /** The value in values.yaml; absent for a parameter only the schema names. */
  default?: unknown;
  required: boolean;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  pattern?: string;
  description: string;
}

function comment(text: string | null | undefined): string {
  return (text ?? "").replace(/\s+/g, " ").trim();
}

function typeOf(schema: Schema | undefined, value: unknown): string {
  if (typeof schema?.type === "string") return schema.type;
  const first = Array.isArray(schema?.enum) ? schema.enum[0] : undefined;
  const sample = first ?? value;
  if (Array.isArray(sample)) return "array";
  if (typeof sample === "number") return Number.isInteger(sample) ? "integer" : "number";
  if (sample === null || sample === undefined) return "any";
  return typeof sample === "object" ? "object" : typeof sample;
}

function property(schema: Schema | undefined, key: string): Schema | undefined {
  const properties = schema?.properties;
  if (!isSchema(properties)) return undefined;
  const child = properties[key];
  return isSchema(child) ? child : undefined;
}

function field(
  path: string,
  schema: Schema | undefined,
  value: unknown,
  required: boolean,
  description: string,
): ValueField {
  const num = (key: string): number | undefined => {
    const v = schema?.[key];
    return typeof v === "number" ? v : undefined;
  };
  return {
    path,
    type: typeOf(schema, value),
    required,
    enum: Array.isArray(schema?.enum) ? schema.enum : undefined,
    minimum: num("minimum"),
    maximum: num("maximum"),
    minLength: num("minLength"),
    pattern: typeof schema?.pattern === "string" ? schema.pattern : undefined,
    description: description || comment(typeof schema?.description === "string" ? schema.description : ""),
  };
}

function keyOf(pair: Pair): string {
  return isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
}

/**
 * The comment that documents a pair: the one above its key, plus, for the first key of a nested
 * map, the one yaml attaches to the map itself (it sits above that first key in the file).
 */
function pairComment(map: YAMLMap, index: number, pair: Pair): string {
  const parts: string[] = [];
  if (index === 0) parts.push(comment(map.commentBefore));
  if (isNode(pair.key)) parts.push(comment(pair.key.commentBefore));
  if (isScalar(pair.value) || isSeq(pair.value)) parts.push(comment(pair.value.comment));
  return parts.filter(Boolean).join(" ");
}

function walk(map: YAMLMap, prefix: string, schema: Schema | undefined, into: ValueField[]): void {
  const required = new Set(Array.isArray(schema?.required) ? schema.required : []);
  const seen = new Set<string>();
  map.items.forEach((pair, index) => {
    if (!isPair(pair)) return;
    const key = keyOf(pair);
    seen.add(key);
    const path = `${prefix}${key}`;
    const childSchema = property(schema, key);
    const node = isNode(pair.value) ? pair.value : undefined;
    const value: unknown = node ? node.toJSON() : null;
    const row = field(path, childSchema, value, required.has(key), pairComment(map, index, pair));
    if (isMap(node) && node.items.length > 0) {
      // A section gets a row of its own only when something describes it; its leaves always do.
      if (row.description) into.push(row);
      walk(node, `${path}.`, childSchema, into);
    } else {
      into.push({ ...row, default: value });
    }
  });
  const properties = schema?.properties;
  if (!isSchema(properties)) return;
  for (const [key, child] of Object.entries(properties)) {
    if (seen.has(key) || !isSchema(child)) continue;
    into.push(field(`${prefix}${key}`, child, undefined, required.has(key), ""));
  }
}

/** Every parameter of the chart whose values.yaml and values.schema.json are given, in file order. */
export function valueFields(valuesFile: string, schemaFile: string): ValueField[] {
  let document: ReturnType<typeof parseDocument>;
  let schema: unknown;
  try {
    document = parseDocument(readFileSync(valuesFile, "utf8"));
    schema = JSON.parse(readFileSync(schemaFile, "utf8"));
  } catch (error) {
    throw new Error(`cannot read the chart's ${valuesFile} or ${schemaFile}`, { cause: error });
  }
  if (document.errors.length > 0) throw new Error(`${valuesFile}: ${document.errors[0]?.message}`);
  const root = document.contents;
  if (!(root instanceof YAMLMap)) throw new Error(`${valuesFile} is not a map of values`);
  const into: ValueField[] = [];
  walk(root, "", isSchema(schema) ? schema : undefined, into);
  return into;
}

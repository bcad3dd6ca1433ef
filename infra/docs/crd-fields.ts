// The fields of a CRD's openAPIV3Schema as a flat list, one entry per field path (`spec.pod.labels`,
// `spec.pod.etcdEnv[].name`), with what the API server enforces on each: type, default, enum,
// bounds, pattern, required-ness and CEL rules. infra/docs/api-reference.ts renders them; this
// module only reads the schema, so a field added to shared/api shows up without touching either.

import { isSchema, type Schema } from "./schema.ts";

function schemaAt(schema: Schema, key: string): Schema | undefined {
  const v = schema[key];
  return isSchema(v) ? v : undefined;
}

function stringsAt(schema: Schema, key: string): string[] {
  const v = schema[key];
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
}

function numberAt(schema: Schema, key: string): number | undefined {
  const v = schema[key];
  return typeof v === "number" ? v : undefined;
}

/** A CEL rule (x-kubernetes-validations) and where it sits. */
export interface FieldRule {
  path: string;
  rule: string;
  message?: string;
  messageExpression?: string;
}

/** One bound or shape the schema puts on a field, for people ("1 to 9", "one of S3, OSS"). */
export type Constraint =
  | { kind: "enum"; values: unknown[] }
  | { kind: "range"; what: "value" | "length" | "items"; min?: number; max?: number }
  | { kind: "pattern"; pattern: string }
  | { kind: "format"; format: string }
  | { kind: "free-form" }
  | { kind: "list-map"; keys: string[] }
  | { kind: "rules"; count: number };

export interface Field {
  /** Dotted path from the object's root; `[]` stands for the items of a list. */
  path: string;
  /** `string`, `integer`, `[]string`, `map[string]string`, `object`, … */
  type: string;
  required: boolean;
  default?: unknown;
  description: string;
  constraints: Constraint[];
  /** What each item of a list without fields of its own must be (a pattern, a length). */
  itemConstraints: Constraint[];
}

/** The Kubernetes-style type name of a schema: lists as `[]T`, string-keyed maps as `map[string]T`. */
export function typeName(schema: Schema): string {
  const type = typeof schema.type === "string" ? schema.type : "";
  const items = schemaAt(schema, "items");
  if (type === "array") return `[]${items ? typeName(items) : "any"}`;
  const values = schemaAt(schema, "additionalProperties");
  if (type === "object" && values && !schemaAt(schema, "properties")) return `map[string]${typeName(values)}`;
  if (type) return type;
  if (schema["x-kubernetes-int-or-string"] === true) return "integer or string";
  return "any";
}

function constraintsOf(schema: Schema): Constraint[] {
  const out: Constraint[] = [];
  if (Array.isArray(schema.enum)) out.push({ kind: "enum", values: schema.enum });
  const ranges = [
    ["value", "minimum", "maximum"],
    ["length", "minLength", "maxLength"],
    ["items", "minItems", "maxItems"],
  ] as const;
  for (const [what, low, high] of ranges) {
    const min = numberAt(schema, low);
    const max = numberAt(schema, high);
    if (min !== undefined || max !== undefined) out.push({ kind: "range", what, min, max });
  }
  if (typeof schema.pattern === "string") out.push({ kind: "pattern", pattern: schema.pattern });
  if (typeof schema.format === "string") out.push({ kind: "format", format: schema.format });
  if (schema["x-kubernetes-preserve-unknown-fields"] === true) out.push({ kind: "free-form" });
  if (schema["x-kubernetes-list-type"] === "map") {
    out.push({ kind: "list-map", keys: stringsAt(schema, "x-kubernetes-list-map-keys") });
  }
  const rules = schema["x-kubernetes-validations"];
  if (Array.isArray(rules) && rules.length > 0) out.push({ kind: "rules", count: rules.length });
  return out;
}

/** The CEL rules on a schema node, labelled with its path. */
export function rulesOf(schema: Schema, path: string): FieldRule[] {
  const rules = schema["x-kubernetes-validations"];
  if (!Array.isArray(rules)) return [];
  return rules.filter(isSchema).map((r) => ({
    path,
    rule: typeof r.rule === "string" ? r.rule : "",
    ...(typeof r.message === "string" ? { message: r.message } : {}),
    ...(typeof r.messageExpression === "string" ? { messageExpression: r.messageExpression } : {}),
  }));
}

interface Walk {
  fields: Field[];
  rules: FieldRule[];
}

function walk(schema: Schema, path: string, required: boolean, into: Walk): void {
  let description = typeof schema.description === "string" ? schema.description : "";
  let itemConstraints: Constraint[] = [];
  into.rules.push(...rulesOf(schema, path));
  const items = schemaAt(schema, "items");
  const itemFields = items ? schemaAt(items, "properties") : undefined;
  if (items && typeof items.description === "string")
    description = `${description} Each item: ${items.description}`;
  // Items without fields of their own (strings, free-form objects) get no rows: their bounds go
  // into the list's row.
  if (items && !itemFields) itemConstraints = constraintsOf(items);
  if (items) into.rules.push(...rulesOf(items, `${path}[]`));
  into.fields.push({
    path,
    type: typeName(schema),
    required,
    ...("default" in schema ? { default: schema.default } : {}),
    description: description.trim(),
    constraints: constraintsOf(schema),
    itemConstraints,
  });
  if (items && itemFields) children(items, `${path}[]`, into);
  else children(schema, path, into);
}

function children(schema: Schema, path: string, into: Walk): void {
  const properties = schemaAt(schema, "properties");
  if (!properties) return;
  const required = new Set(stringsAt(schema, "required"));
  for (const [name, child] of Object.entries(properties)) {
    if (isSchema(child)) walk(child, `${path}.${name}`, required.has(name), into);
  }
}

/**
 * Every field under `root` (e.g. the schema's `spec`), `root` itself first, with the CEL rules
 * found on the way.
 */
export function fieldsOf(schema: Schema, root: string, required: boolean): Walk {
  const into: Walk = { fields: [], rules: [] };
  walk(schema, root, required, into);
  return into;
}

// Reads the CustomResourceDefinitions in manifests/crds/ into the little the API reference shows:
// names, scope, and per version its schema, subresources and printer columns. A file that is not
// such a CRD is an error naming the file, so the reference never silently leaves a kind out.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { isSchema, type Schema } from "./schema.ts";

export interface PrinterColumn {
  name: string;
  type: string;
  jsonPath: string;
  description?: string;
  priority: number;
}

export interface CrdVersion {
  name: string;
  served: boolean;
  storage: boolean;
  schema: Schema;
  subresources: Schema;
  printerColumns: PrinterColumn[];
}

export interface Crd {
  file: string;
  group: string;
  kind: string;
  listKind: string;
  plural: string;
  singular: string;
  shortNames: string[];
  scope: string;
  versions: CrdVersion[];
}

function field(object: Schema, key: string, where: string): Schema {
  const v = object[key];
  if (!isSchema(v)) throw new Error(`${where}: ${key} is missing or not an object`);
  return v;
}

function text(object: Schema, key: string, where: string): string {
  const v = object[key];
  if (typeof v !== "string") throw new Error(`${where}: ${key} is missing or not a string`);
  return v;
}

function column(raw: unknown, where: string): PrinterColumn {
  if (!isSchema(raw)) throw new Error(`${where}: a printer column is not an object`);
  return {
    name: text(raw, "name", where),
    type: text(raw, "type", where),
    jsonPath: text(raw, "jsonPath", where),
    ...(typeof raw.description === "string" ? { description: raw.description } : {}),
    priority: typeof raw.priority === "number" ? raw.priority : 0,
  };
}

function version(raw: unknown, where: string): CrdVersion {
  if (!isSchema(raw)) throw new Error(`${where}: a version is not an object`);
  const name = text(raw, "name", where);
  const at = `${where} ${name}`;
  const columns = raw.additionalPrinterColumns;
  return {
    name,
    served: raw.served === true,
    storage: raw.storage === true,
    schema: field(field(raw, "schema", at), "openAPIV3Schema", at),
    subresources: isSchema(raw.subresources) ? raw.subresources : {},
    printerColumns: Array.isArray(columns) ? columns.map((c) => column(c, at)) : [],
  };
}

export function readCrd(file: string): Crd {
  let document: unknown;
  try {
    document = parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new Error(`cannot read the CRD ${file}`, { cause: error });
  }
  if (!isSchema(document) || document.kind !== "CustomResourceDefinition") {
    throw new Error(`${file} is not a CustomResourceDefinition`);
  }
  const spec = field(document, "spec", file);
  const names = field(spec, "names", file);
  const versions = spec.versions;
  if (!Array.isArray(versions) || versions.length === 0) throw new Error(`${file}: no versions`);
  return {
    file,
    group: text(spec, "group", file),
    kind: text(names, "kind", file),
    listKind: text(names, "listKind", file),
    plural: text(names, "plural", file),
    singular: text(names, "singular", file),
    shortNames: Array.isArray(names.shortNames) ? names.shortNames.map(String) : [],
    scope: text(spec, "scope", file),
    versions: versions.map((v) => version(v, file)),
  };
}

/** Every CRD of a directory, in `order` of kinds first (the main resource before its helpers), then by kind. */
export function readCrds(dir: string, order: readonly string[] = []): Crd[] {
  const crds = readdirSync(dir)
    .filter((f) => f.endsWith(".yaml") || f.endsWith(".yml"))
    .map((f) => readCrd(join(dir, f)));
  const rank = (kind: string) => {
    const i = order.indexOf(kind);
    return i < 0 ? order.length : i;
  };
  return crds.sort((a, b) => rank(a.kind) - rank(b.kind) || a.kind.localeCompare(b.kind));
}

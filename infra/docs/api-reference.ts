// Renders docs/api.md, the reference of EtcdCluster, EtcdBackup and EtcdRestore, from the CRDs in
// manifests/crds/ (which infra/crds.ts generates from shared/api/): every field of spec and status
// with what the API server enforces, the CEL rules, the subresources and the printer columns.
//   node infra/docs/api-reference.ts          write docs/api.md
//   node infra/docs/api-reference.ts --check  exit 1 when docs/api.md is not what it would write
// tests/docs-api.test.ts runs the check, so a CRD change without the page fails the tests.
import { join } from "node:path";
import { type Constraint, type Field, type FieldRule, fieldsOf, rulesOf } from "./crd-fields.ts";
import { type Crd, type CrdVersion, readCrds } from "./crd-model.ts";
import { code, inline, prose, proseCode, table, value } from "./markdown.ts";
import { formatted, generatorMain, ROOT } from "./page.ts";
import { isSchema } from "./schema.ts";

export const PAGE = join(ROOT, "docs", "api.md");
export const CRD_DIR = join(ROOT, "manifests", "crds");
const COMMAND = "node infra/docs/api-reference.ts";
const KIND_ORDER = ["EtcdCluster", "EtcdBackup", "EtcdRestore"];

/** GitHub's anchor of a heading made of letters, digits and spaces (all the headings here). */
function anchor(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, "")
    .replace(/ /g, "-");
}

function range(c: Extract<Constraint, { kind: "range" }>): string {
  const unit = c.what === "length" ? "length " : "";
  const items = c.what === "items" ? " items" : "";
  if (c.min !== undefined && c.max !== undefined) return `${unit}${c.min} to ${c.max}${items}`;
  if (c.min !== undefined) return `${unit}≥ ${c.min}${items}`;
  return `${unit}≤ ${c.max}${items}`;
}

function constraint(c: Constraint, rulesHeading: string): string {
  switch (c.kind) {
    case "enum":
      return `one of ${c.values.map(value).join(", ")}`;
    case "range":
      return range(c);
    case "pattern":
      return `matches ${code(c.pattern)}`;
    case "format":
      return `format ${code(c.format)}`;
    case "free-form":
      return "any fields (not checked)";
    case "list-map":
      return `a list map keyed by ${c.keys.map(code).join(", ")}`;
    case "rules":
      return `[${c.count === 1 ? "a rule" : `${c.count} rules`}](#${anchor(rulesHeading)})`;
  }
}

function constraints(field: Field, rulesHeading: string): string {
  const own = field.constraints.map((c) => constraint(c, rulesHeading));
  const items = field.itemConstraints.map((c) => constraint(c, rulesHeading));
  if (items.length > 0) own.push(`each item: ${items.join(", ")}`);
  return own.join("; ");
}

function fieldTable(fields: Field[], rulesHeading: string): string[] {
  return table(
    ["field", "type", "required", "default", "constraints", "description"],
    fields.map((f) => [
      code(f.path),
      code(f.type),
      f.required ? "yes" : "",
      "default" in f ? value(f.default) : "",
      constraints(f, rulesHeading),
      inline(f.description),
    ]),
  );
}

function ruleLine(rule: FieldRule): string {
  const said = rule.message
    ? prose(rule.message)
    : `${proseCode(rule.rule)}${rule.messageExpression ? `, with the message ${proseCode(rule.messageExpression)}` : ""}`;
  return `- ${rule.path ? proseCode(rule.path) : "the object"}: ${said}`;
}

function subresources(version: CrdVersion): string[] {
  const out: string[] = [];
  if (isSchema(version.subresources.status)) {
    out.push("`status` (written by the operator through its own endpoint; a spec change leaves it alone)");
  }
  const scale = version.subresources.scale;
  if (isSchema(scale)) {
    const path = (key: string) => (typeof scale[key] === "string" ? proseCode(String(scale[key])) : "none");
    out.push(
      `\`scale\` (\`kubectl scale\` and autoscalers): replicas ${path("specReplicasPath")}, ` +
        `current ${path("statusReplicasPath")}, label selector ${path("labelSelectorPath")}`,
    );
  }
  return out;
}

function printerColumns(version: CrdVersion): string[] {
  return table(
    ["column", "type", "JSON path", "shown by", "description"],
    version.printerColumns.map((c) => [
      inline(c.name),
      code(c.type),
      code(c.jsonPath),
      c.priority > 0 ? "`kubectl get -o wide`" : "`kubectl get`",
      inline(c.description ?? ""),
    ]),
  );
}

function versionSection(crd: Crd, version: CrdVersion): string[] {
  const suffix = crd.versions.length > 1 ? ` ${version.name}` : "";
  const title = `${crd.kind}${suffix}`;
  const rulesHeading = `${title} validation rules`;
  const root = version.schema;
  const properties = isSchema(root.properties) ? root.properties : {};
  const required = new Set(Array.isArray(root.required) ? root.required : []);
  const rules: FieldRule[] = rulesOf(root, "");
  const lines: string[] = [];
  const served = [version.served ? "served" : "not served", version.storage ? "stored" : ""].filter(Boolean);
  const extras = subresources(version);
  lines.push(
    "",
    `- API version ${proseCode(`${crd.group}/${version.name}`)} (${served.join(", ")}), kind ${proseCode(crd.kind)}, ` +
      `list kind ${proseCode(crd.listKind)}`,
    `- Resource ${proseCode(crd.plural)}, singular ${proseCode(crd.singular)}` +
      (crd.shortNames.length > 0 ? `, short names ${crd.shortNames.map(proseCode).join(", ")}` : "") +
      `; ${crd.scope === "Namespaced" ? "namespaced" : "cluster-scoped"}`,
    `- Subresources: ${extras.length > 0 ? extras.join("; ") : "none"}`,
  );
  for (const part of ["spec", "status"]) {
    const schema = properties[part];
    if (!isSchema(schema)) continue;
    const walked = fieldsOf(schema, part, required.has(part));
    rules.push(...walked.rules);
    lines.push("", `### ${title} ${part}`, "", ...fieldTable(walked.fields, rulesHeading));
  }
  if (rules.length > 0) {
    lines.push(
      "",
      `### ${rulesHeading}`,
      "",
      "CEL rules (`x-kubernetes-validations`) the API server checks; a change that breaks one is refused with its message.",
      "",
      ...rules.map(ruleLine),
    );
  }
  if (version.printerColumns.length > 0) {
    lines.push("", `### ${title} printer columns`, "", ...printerColumns(version));
  }
  return lines;
}

function crdSection(crd: Crd): string[] {
  const description = crd.versions.map((v) => v.schema.description).find((d) => typeof d === "string");
  return [
    "",
    `## ${crd.kind}`,
    ...(description ? ["", prose(description)] : []),
    ...crd.versions.flatMap((v) => versionSection(crd, v)),
  ];
}

/** The page, before Biome pads its tables. */
export function renderApiReference(crds: Crd[] = readCrds(CRD_DIR, KIND_ORDER)): string {
  const groups = [...new Set(crds.map((c) => c.group))];
  const lines = [
    "# API reference",
    "",
    `<!-- generated by infra/docs/api-reference.ts from manifests/crds; do not edit: run ${COMMAND} -->`,
    "",
    `The custom resources of the operator, group ${groups.map(proseCode).join(", ")}, as their CustomResourceDefinitions ` +
      "in `manifests/crds/` declare them (`node infra/crds.ts` generates those from the TypeBox types in " +
      "`shared/api/`): every field of spec and status, with what the API server checks. What the operator does " +
      "with them is in [operator.md](operator.md); the admission webhook refuses more than a schema can say " +
      "([http-api.md](http-api.md)).",
    "",
    ...crds.map((c) => {
      const description = c.versions[0]?.schema.description;
      return `- [${c.kind}](#${anchor(c.kind)})${typeof description === "string" ? `: ${prose(description)}` : ""}`;
    }),
    "",
    "In the tables, `[]` in a path stands for each item of a list, `[]T` is a list of T and `map[string]T` an object " +
      "whose keys are yours. A **required** field must be given whenever the object holding it is; the API server " +
      "fills in a **default** when the field is left out. Status is written by the operator only.",
    ...crds.flatMap(crdSection),
    "",
  ];
  return lines.join("\n");
}

/** The page as it must be on disk. */
export function apiReferencePage(): string {
  return formatted(renderApiReference(), PAGE);
}

if (import.meta.main) generatorMain(COMMAND, { [PAGE]: apiReferencePage });

// The CustomResourceDefinitions of EtcdCluster, EtcdBackup and EtcdRestore, generated from the TypeBox
// schemas in shared/api so the API server, the TypeScript types and the operator's checks never drift.
//   node infra/crds.ts          write manifests/crds/*.yaml
//   node infra/crds.ts --check  exit 1 when the committed files differ from what would be generated
// installCrds(kc) applies the same objects to a cluster (the operator does it at start-up when allowed).

import { readFileSync, writeFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import {
  ApiextensionsV1Api,
  CustomObjectsApi,
  type KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import type { TSchema } from "@sinclair/typebox";
import { Document, Scalar, stringify, visit } from "yaml";
import {
  BACKUP_KIND,
  BACKUP_LIST_KIND,
  BACKUP_PLURAL,
  BACKUP_SINGULAR,
  EtcdBackupSpecSchema,
  EtcdBackupStatusSchema,
} from "../shared/api/etcd-backup.ts";
import {
  CLUSTER_OBJECT_VALIDATIONS,
  EtcdClusterSpecSchema,
  EtcdClusterStatusSchema,
  GROUP,
  KIND,
  LIST_KIND,
  PLURAL,
  SHORT_NAMES,
  SINGULAR,
  VERSION,
} from "../shared/api/etcd-cluster.ts";
import {
  EtcdRestoreSpecSchema,
  EtcdRestoreStatusSchema,
  RESTORE_KIND,
  RESTORE_LIST_KIND,
  RESTORE_OBJECT_VALIDATIONS,
  RESTORE_PLURAL,
  RESTORE_SINGULAR,
} from "../shared/api/etcd-restore.ts";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
export const CRD_DIR = join(ROOT, "manifests", "crds");
export const FIELD_MANAGER = "etcd-operator";

type JsonSchema = Record<string, unknown>;

// ---------------------------------------------------------------------------------------------------------
// TypeBox → structural OpenAPI v3

/** JSONSchemaProps keys a structural CRD schema may carry, copied as they are. */
const PLAIN_KEYS = new Set([
  "description",
  "type",
  "format",
  "default",
  "maximum",
  "minimum",
  "maxLength",
  "minLength",
  "pattern",
  "maxItems",
  "minItems",
  "multipleOf",
  "enum",
  "maxProperties",
  "minProperties",
  "required",
  "nullable",
  "example",
]);
/** TypeBox- or JSON-Schema-only keys with no meaning to the API server. */
const DROPPED_KEYS = new Set(["$id", "$schema", "title", "examples"]);

function isSchema(value: unknown): value is JsonSchema {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * A TypeBox schema as a structural OpenAPI v3 schema: only string keys are read (TypeBox's [Kind] and
 * [OptionalKind] are symbols), Records become additionalProperties, unions of literals become enums and
 * JSON Schema's numeric exclusiveMinimum/Maximum become OpenAPI 3.0's boolean form. Anything else that a
 * CRD would reject or misread throws here, at generation time, instead of at install time.
 */
export function toStructural(schema: unknown, at = "<root>"): JsonSchema {
  if (!isSchema(schema)) throw new Error(`${at}: expected a schema object, got ${JSON.stringify(schema)}`);
  const out: JsonSchema = {};
  for (const [key, value] of Object.entries(schema)) {
    if (DROPPED_KEYS.has(key)) continue;
    if (PLAIN_KEYS.has(key) || key.startsWith("x-kubernetes-")) {
      out[key] = value;
    } else if (key === "const") {
      out.enum = [value];
    } else if (key === "exclusiveMinimum" || key === "exclusiveMaximum") {
      if (typeof value !== "number") throw new Error(`${at}: ${key} must be a number in TypeBox`);
      out[key === "exclusiveMinimum" ? "minimum" : "maximum"] = value;
      out[key] = true;
    } else if (key === "properties") {
      if (!isSchema(value)) throw new Error(`${at}: properties must be an object`);
      // An embedded Kubernetes object is Type.Object({}) kept whole; empty properties would say "no fields".
      if (Object.keys(value).length === 0 && schema["x-kubernetes-preserve-unknown-fields"] === true)
        continue;
      out.properties = Object.fromEntries(
        Object.entries(value).map(([name, sub]) => [name, toStructural(sub, `${at}.${name}`)]),
      );
    } else if (key === "items") {
      if (Array.isArray(value))
        throw new Error(`${at}: a tuple has no structural CRD equivalent; use an array`);
      out.items = toStructural(value, `${at}[]`);
    } else if (key === "patternProperties") {
      // Type.Record(Type.String(), V) is the only map we use: any key, so it is additionalProperties.
      const entries = isSchema(value) ? Object.entries(value) : [];
      const [pattern, sub] = entries[0] ?? [];
      if (entries.length !== 1 || (pattern !== "^(.*)$" && pattern !== "^.*$")) {
        throw new Error(`${at}: only Records with string keys map to a CRD (additionalProperties)`);
      }
      out.additionalProperties = toStructural(sub, `${at}{}`);
    } else if (key === "additionalProperties") {
      // false is TypeBox's "no other keys"; a CRD forbids it and prunes unknown fields anyway.
      if (value === false) continue;
      out.additionalProperties =
        value === true ? { "x-kubernetes-preserve-unknown-fields": true } : toStructural(value, `${at}{}`);
    } else if (key === "anyOf") {
      Object.assign(out, literalUnion(value, at));
    } else {
      throw new Error(
        `${at}: the schema keyword "${key}" has no structural CRD equivalent; extend toStructural`,
      );
    }
  }
  // description and type first, so the YAML reads like kubectl explain.
  const { description, type, ...rest } = out;
  const ordered: JsonSchema = {
    ...(description === undefined ? {} : { description }),
    ...(type === undefined ? {} : { type }),
    ...rest,
  };
  if (out.properties !== undefined && out.additionalProperties !== undefined) {
    throw new Error(`${at}: a CRD schema cannot have both properties and additionalProperties`);
  }
  if (out.type === undefined && out["x-kubernetes-preserve-unknown-fields"] !== true) {
    throw new Error(`${at}: every node of a structural schema needs a type`);
  }
  return ordered;
}

/** Type.Union([Type.Literal("a"), …]) → { type: "string", enum: ["a", …] }. */
function literalUnion(members: unknown, at: string): JsonSchema {
  if (!Array.isArray(members)) throw new Error(`${at}: anyOf must be a list`);
  const values: unknown[] = [];
  const types = new Set<unknown>();
  for (const member of members) {
    if (!isSchema(member) || !("const" in member)) {
      throw new Error(`${at}: only unions of literals map to a CRD (enum); use a single type otherwise`);
    }
    values.push(member.const);
    types.add(member.type);
  }
  const [type] = [...types];
  if (types.size !== 1 || typeof type !== "string")
    throw new Error(`${at}: an enum's literals must share one type`);
  return { type, enum: values };
}

// ---------------------------------------------------------------------------------------------------------
// The three CRDs

interface PrinterColumn {
  name: string;
  type: "string" | "integer" | "number" | "boolean" | "date";
  jsonPath: string;
  description?: string;
  priority?: number;
}

interface Resource {
  kind: string;
  listKind: string;
  plural: string;
  singular: string;
  shortNames?: readonly string[];
  description: string;
  spec: TSchema;
  status: TSchema;
  validations?: readonly { rule: string; message: string }[];
  columns: PrinterColumn[];
  scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath: string };
}

const AGE: PrinterColumn = { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" };

const RESOURCES: Resource[] = [
  {
    kind: KIND,
    listKind: LIST_KIND,
    plural: PLURAL,
    singular: SINGULAR,
    shortNames: SHORT_NAMES,
    description:
      "An etcd cluster run by the etcd operator: it creates one pod per member, adds and removes members " +
      "to match spec.size and upgrades them to spec.version one at a time.",
    spec: EtcdClusterSpecSchema,
    status: EtcdClusterStatusSchema,
    validations: CLUSTER_OBJECT_VALIDATIONS,
    columns: [
      { name: "Size", type: "integer", jsonPath: ".spec.size", description: "Members wanted" },
      { name: "Ready", type: "integer", jsonPath: ".status.readyMembers", description: "Members ready" },
      {
        name: "Version",
        type: "string",
        jsonPath: ".status.currentVersion",
        description: "etcd version running",
      },
      { name: "Phase", type: "string", jsonPath: ".status.phase" },
      AGE,
    ],
    scale: {
      specReplicasPath: ".spec.size",
      statusReplicasPath: ".status.size",
      labelSelectorPath: ".status.selector",
    },
  },
  {
    kind: BACKUP_KIND,
    listKind: BACKUP_LIST_KIND,
    plural: BACKUP_PLURAL,
    singular: BACKUP_SINGULAR,
    description: "A backup of an etcd cluster to object storage, taken once or periodically.",
    spec: EtcdBackupSpecSchema,
    status: EtcdBackupStatusSchema,
    columns: [
      { name: "Storage", type: "string", jsonPath: ".spec.storageType" },
      { name: "Succeeded", type: "boolean", jsonPath: ".status.succeeded" },
      { name: "Last Success", type: "date", jsonPath: ".status.lastSuccessDate" },
      { name: "Revision", type: "integer", jsonPath: ".status.etcdRevision", priority: 1 },
      { name: "Size", type: "integer", jsonPath: ".status.backupSize", priority: 1 },
      { name: "Path", type: "string", jsonPath: ".status.backupPath", priority: 1 },
      AGE,
    ],
  },
  {
    kind: RESTORE_KIND,
    listKind: RESTORE_LIST_KIND,
    plural: RESTORE_PLURAL,
    singular: RESTORE_SINGULAR,
    description:
      "Recreates an EtcdCluster from a backup. Name it like the cluster; the cluster's members are replaced.",
    spec: EtcdRestoreSpecSchema,
    status: EtcdRestoreStatusSchema,
    validations: RESTORE_OBJECT_VALIDATIONS,
    columns: [
      { name: "Cluster", type: "string", jsonPath: ".spec.etcdCluster.name" },
      { name: "Phase", type: "string", jsonPath: ".status.phase" },
      { name: "Succeeded", type: "boolean", jsonPath: ".status.succeeded" },
      { name: "Backup", type: "string", jsonPath: ".status.backupPath", priority: 1 },
      AGE,
    ],
  },
];

/**
 * A CRD in its JSON form (client-node's V1CustomResourceDefinition model uses camelCase names such as
 * xKubernetesValidations that only its serializer maps, so the wire form is typed here).
 */
export interface CrdManifest {
  apiVersion: "apiextensions.k8s.io/v1";
  kind: "CustomResourceDefinition";
  metadata: { name: string };
  spec: {
    group: string;
    names: { kind: string; listKind: string; plural: string; singular: string; shortNames?: string[] };
    scope: "Namespaced";
    versions: {
      name: string;
      served: boolean;
      storage: boolean;
      schema: { openAPIV3Schema: JsonSchema };
      subresources: { status: Record<string, never>; scale?: Resource["scale"] };
      additionalPrinterColumns: PrinterColumn[];
    }[];
  };
}

function crdFor(resource: Resource): CrdManifest {
  const openAPIV3Schema: JsonSchema = {
    type: "object",
    description: resource.description,
    required: ["spec"],
    properties: {
      apiVersion: {
        type: "string",
        description: `The versioned schema of this object: ${GROUP}/${VERSION}.`,
      },
      kind: { type: "string", description: `The kind of this object: ${resource.kind}.` },
      metadata: { type: "object" },
      spec: toStructural(resource.spec, "spec"),
      status: toStructural(resource.status, "status"),
    },
  };
  if (resource.validations) openAPIV3Schema["x-kubernetes-validations"] = resource.validations;
  const names: CrdManifest["spec"]["names"] = {
    kind: resource.kind,
    listKind: resource.listKind,
    plural: resource.plural,
    singular: resource.singular,
  };
  if (resource.shortNames) names.shortNames = [...resource.shortNames];
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${resource.plural}.${GROUP}` },
    spec: {
      group: GROUP,
      names,
      scope: "Namespaced",
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          schema: { openAPIV3Schema },
          subresources: resource.scale ? { status: {}, scale: resource.scale } : { status: {} },
          additionalPrinterColumns: resource.columns,
        },
      ],
    },
  };
}

/** The three CRDs, EtcdCluster first. */
export function crdManifests(): CrdManifest[] {
  return RESOURCES.map(crdFor);
}

// ---------------------------------------------------------------------------------------------------------
// Files

const HEADER = "# Generated by infra/crds.ts from shared/api/*.ts. Do not edit: run `node infra/crds.ts`.\n";

/**
 * YAML as Biome formats it (the project's `biome check .` covers YAML), so generated files pass the lint
 * unchanged: a string that needs quotes gets single quotes when it holds more double quotes than single
 * ones, else double quotes (the yaml package alone would double-quote and escape "it's \"x\"").
 */
function toYaml(value: unknown): string {
  const doc = new Document(value);
  visit(doc, {
    Scalar(_, node) {
      if (typeof node.value !== "string" || node.value.includes("\n")) return;
      const quoted = /^["']/.test(stringify(node.value, { lineWidth: 0 }));
      if (!quoted) return;
      const doubles = node.value.split('"').length - 1;
      const singles = node.value.split("'").length - 1;
      node.type = doubles > singles ? Scalar.QUOTE_SINGLE : Scalar.QUOTE_DOUBLE;
    },
  });
  return doc.toString({ lineWidth: 0 });
}

/** Each CRD's file under manifests/crds and its content. */
export function crdFiles(dir = CRD_DIR): { path: string; content: string }[] {
  return crdManifests().map((crd) => ({
    path: join(dir, `${crd.spec.group}_${crd.spec.names.plural}.yaml`),
    content: HEADER + toYaml(crd),
  }));
}

/** The files that are missing or differ from what the generator writes; empty when all are current. */
export function staleCrdFiles(dir = CRD_DIR): string[] {
  return crdFiles(dir)
    .filter(({ path, content }) => {
      try {
        return readFileSync(path, "utf8") !== content;
      } catch {
        return true;
      }
    })
    .map(({ path }) => path);
}

export async function writeCrdFiles(dir = CRD_DIR): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const files = crdFiles(dir);
  for (const { path, content } of files) writeFileSync(path, content);
  return files.map(({ path }) => path);
}

// ---------------------------------------------------------------------------------------------------------
// Install

/** The Content-Type header that turns a patch into a server-side apply. */
const APPLY = setHeaderOptions("Content-Type", PatchStrategy.ServerSideApply);

/**
 * Creates or updates the three CRDs by server-side apply (so fields other managers added survive) and
 * waits until the API server serves each of them.
 */
export async function installCrds(kc: KubeConfig, options: { timeoutMs?: number } = {}): Promise<void> {
  const api = kc.makeApiClient(ApiextensionsV1Api);
  const crds = crdManifests();
  for (const crd of crds) {
    const name = crd.metadata.name;
    try {
      await api.patchCustomResourceDefinition(
        { name, body: crd, fieldManager: FIELD_MANAGER, force: true },
        APPLY,
      );
    } catch (error) {
      throw new Error(`could not apply the CRD ${name}`, { cause: error });
    }
  }
  for (const crd of crds) await waitEstablished(api, crd.metadata.name, options.timeoutMs ?? 30_000);
  // Established is not yet servable: for a moment after it, requests for the new resource get
  // 429 "storage is (re)initializing". Return only once each resource can be listed.
  const custom = kc.makeApiClient(CustomObjectsApi);
  for (const crd of crds) await waitServed(custom, crd, options.timeoutMs ?? 30_000);
}

async function waitServed(custom: CustomObjectsApi, crd: CrdManifest, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const version = crd.spec.versions.find((v) => v.served)?.name ?? "";
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      await custom.listClusterCustomObject({
        group: crd.spec.group,
        version,
        plural: crd.spec.names.plural,
        limit: 1,
      });
      return;
    } catch (error) {
      lastError = error;
      await sleep(100);
    }
  }
  throw new Error(`the CRD ${crd.metadata.name} is Established but not served within ${timeoutMs} ms`, {
    cause: lastError,
  });
}

async function waitEstablished(api: ApiextensionsV1Api, name: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let conditions = "";
  while (Date.now() < deadline) {
    const crd = await api.readCustomResourceDefinition({ name });
    const found = crd.status?.conditions ?? [];
    conditions = found.map((c) => `${c.type}=${c.status}${c.message ? ` (${c.message})` : ""}`).join(", ");
    if (found.some((c) => c.type === "NamesAccepted" && c.status === "False")) {
      throw new Error(`the CRD ${name} was refused its names: ${conditions}`);
    }
    if (found.some((c) => c.type === "Established" && c.status === "True")) return;
    await sleep(100);
  }
  throw new Error(
    `the CRD ${name} was not Established within ${timeoutMs} ms; conditions: ${conditions || "none"}`,
  );
}

// ---------------------------------------------------------------------------------------------------------
// CLI

async function main(argv: string[]): Promise<number> {
  if (argv.includes("--check")) {
    const stale = staleCrdFiles();
    for (const path of stale) console.error(`out of date: ${relative(ROOT, path)} (run: node infra/crds.ts)`);
    if (stale.length === 0) console.log("CRDs are up to date");
    return stale.length === 0 ? 0 : 1;
  }
  for (const path of await writeCrdFiles()) console.log(`wrote ${relative(ROOT, path)}`);
  return 0;
}

if (import.meta.main) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exitCode = 1;
    },
  );
}

// Readers for the packaging files, for tests/manifests.test.ts: multi-document YAML, the
// Dockerfile's instructions, .dockerignore patterns, and the operator's import graph (what the image
// must contain for `node infra/operator.ts` to start).
import { existsSync, readFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join, normalize, relative } from "node:path";
import { parseAllDocuments } from "yaml";

export const ROOT = new URL("../../", import.meta.url).pathname;

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: unknown;
}

/** Every object of a multi-document YAML text (empty documents skipped). */
export function yamlObjects(text: string): KubeObject[] {
  return parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0)
        throw new Error(`YAML error: ${doc.errors.map((e) => e.message).join("; ")}`);
      return doc.toJS({ maxAliasCount: 100 }) as unknown;
    })
    .filter((value): value is KubeObject => {
      if (value === null || value === undefined) return false;
      const ok = typeof value === "object" && "kind" in value && "apiVersion" in value && "metadata" in value;
      if (!ok) throw new Error(`not a Kubernetes object: ${JSON.stringify(value).slice(0, 200)}`);
      return true;
    });
}

export function ofKind<T>(objects: KubeObject[], kind: string): (T & KubeObject)[] {
  return objects.filter((o) => o.kind === kind) as (T & KubeObject)[];
}

// ---------------------------------------------------------------------------------------------------------
// Dockerfile

export interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

/** The Dockerfile's instructions, with line continuations joined and comments and directives dropped. */
export function dockerfileInstructions(text: string): Instruction[] {
  const instructions: Instruction[] = [];
  let pending = "";
  let startLine = 0;
  text.split("\n").forEach((raw, index) => {
    const line = raw.trimEnd();
    if (pending === "" && (line.trim() === "" || line.trimStart().startsWith("#"))) return;
    if (pending === "") startLine = index + 1;
    if (line.endsWith("\\")) {
      pending += `${line.slice(0, -1)} `;
      return;
    }
    const full = (pending + line).trim();
    pending = "";
    const match = /^([A-Za-z]+)\s+(.*)$/.exec(full);
    if (!match?.[1] || match[2] === undefined)
      throw new Error(`Dockerfile line ${startLine}: cannot parse "${full}"`);
    instructions.push({ keyword: match[1].toUpperCase(), args: match[2].trim(), line: startLine });
  });
  if (pending !== "") throw new Error("Dockerfile ends inside a line continuation");
  return instructions;
}

/** The JSON (exec) form of CMD/ENTRYPOINT/RUN, which Docker requires for signals to reach node. */
export function execForm(instruction: Instruction): string[] {
  const parsed: unknown = JSON.parse(instruction.args);
  if (!Array.isArray(parsed) || !parsed.every((p) => typeof p === "string")) {
    throw new Error(`line ${instruction.line}: ${instruction.keyword} must be in JSON exec form`);
  }
  return parsed;
}

/** COPY without --from: [sources…], destination. */
export function copySources(instruction: Instruction): { from: string | undefined; sources: string[] } {
  const words = instruction.args.split(/\s+/);
  const flags = words.filter((w) => w.startsWith("--"));
  const paths = words.filter((w) => !w.startsWith("--"));
  const from = flags.find((f) => f.startsWith("--from="))?.slice("--from=".length);
  return { from, sources: paths.slice(0, -1) };
}

// ---------------------------------------------------------------------------------------------------------
// .dockerignore: the subset of its syntax the project uses (paths, `*`, `**`, no `!` exceptions).

export function dockerignoreMatcher(text: string): (path: string) => boolean {
  const patterns = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  if (patterns.some((p) => p.startsWith("!")))
    throw new Error(".dockerignore exceptions (!) are not supported here");
  const regexes = patterns.map((pattern) => {
    const body = pattern
      .replace(/^\/+/, "")
      .split("/")
      .map((part) =>
        part === "**"
          ? "(?:.*)"
          : part
              .replace(/[.+^${}()|[\]\\]/g, "\\$&")
              .replace(/\*/g, "[^/]*")
              .replace(/\?/g, "[^/]"),
      )
      .join("/")
      .replace(/\(\?:\.\*\)\//g, "(?:.*/)?");
    // A pattern excludes the path itself and everything under it.
    return new RegExp(`^${body}(?:/.*)?$`);
  });
  return (path: string) => regexes.some((r) => r.test(normalize(path)));
}

// ---------------------------------------------------------------------------------------------------------
// The import graph of the operator's entry point

export interface ImportGraph {
  /** Repository-relative paths of every local module reached. */
  files: string[];
  /** npm package names imported (without node: builtins). */
  packages: string[];
}

// `import type` / `export type` are erased by type stripping: they load nothing at run time.
const IMPORT_RE =
  /(?:^|[^\w.])(?:import|export)\s+(type\s+)?[^;]*?from\s*["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)|^import\s*["']([^"']+)["']/gm;

function packageName(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : (parts[0] ?? specifier);
}

/** Follows static and literal dynamic imports from `entry` (repository-relative) through local files. */
export function importGraph(entry: string): ImportGraph {
  const files = new Set<string>();
  const packages = new Set<string>();
  const builtins = new Set(builtinModules);
  const queue = [entry];
  while (queue.length > 0) {
    const file = queue.pop();
    if (file === undefined || files.has(file)) continue;
    const path = join(ROOT, file);
    if (!existsSync(path)) throw new Error(`${file} is imported but does not exist`);
    files.add(file);
    const source = readFileSync(path, "utf8");
    for (const match of source.matchAll(IMPORT_RE)) {
      if (match[1] !== undefined) continue;
      const specifier = match[2] ?? match[3] ?? match[4];
      if (specifier === undefined) continue;
      if (specifier.startsWith(".")) {
        queue.push(relative(ROOT, join(dirname(path), specifier)));
      } else if (!specifier.startsWith("node:") && !builtins.has(specifier)) {
        packages.add(packageName(specifier));
      }
    }
  }
  return { files: [...files].sort(), packages: [...packages].sort() };
}

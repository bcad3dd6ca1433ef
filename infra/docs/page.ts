// Writing or checking a generated documentation page. A page is what its generator renders, run
// through Biome's formatter (it pads Markdown tables), so that `biome check` and `--check` agree on
// what the page must be. A generator either owns the whole page or a section between two marker
// comments, leaving the prose around it to people.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** The page as Biome formats it; `path` tells Biome it is Markdown (the file itself is not read). */
export function formatted(page: string, path: string): string {
  const biome = fileURLToPath(new URL("../../node_modules/.bin/biome", import.meta.url));
  try {
    return execFileSync(biome, ["format", `--stdin-file-path=${path}`], { input: page, encoding: "utf8" });
  } catch (error) {
    throw new Error(`biome could not format the page for ${relative(ROOT, path)}`, { cause: error });
  }
}

/** The page with the text between `start` and `end` (markers kept) replaced by `section`. */
export function replaceSection(page: string, start: string, end: string, section: string): string {
  const from = page.indexOf(start);
  const to = page.indexOf(end, from);
  if (from < 0 || to < 0) throw new Error(`the page has no section between "${start}" and "${end}"`);
  return `${page.slice(0, from)}${start}\n\n${section.trim()}\n\n${page.slice(to)}`;
}

/**
 * What a generator's command line does: writes the page, or with `check` only compares and returns
 * a message saying how to bring a stale page up to date (undefined when current).
 */
export function writeOrCheck(
  path: string,
  rendered: string,
  check: boolean,
  command: string,
): string | undefined {
  const current = existsSync(path) ? readFileSync(path, "utf8") : "";
  if (check) {
    return current === rendered ? undefined : `${relative(ROOT, path)} is stale: run ${command}`;
  }
  if (current !== rendered) writeFileSync(path, rendered);
  return undefined;
}

/**
 * A generator's command line: writes each output (path → its rendering), or with `--check` exits 1
 * with a message for each one that is stale.
 */
export function generatorMain(command: string, outputs: Record<string, () => string>): void {
  const { values } = parseArgs({ options: { check: { type: "boolean", default: false } } });
  const problems = Object.entries(outputs).flatMap(([path, render]) => {
    const problem = writeOrCheck(path, render(), values.check, command);
    return problem ? [problem] : [];
  });
  if (problems.length > 0) {
    process.stderr.write(`${problems.join("\n")}\n`);
    process.exit(1);
  }
}

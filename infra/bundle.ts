// The operator as its image runs it: infra/operator.ts bundled with @kubernetes/client-node into
// dist/ (one entry, a chunk per role that operator.ts imports on demand).
//   node infra/bundle.ts [--outdir dist]
//
// Why: client-node 2.x is generated code, and its index loads every API group's classes (two
// 7 MB modules among ~1,000 files) although the operator calls three of them. Node keeps each
// module's source and compiled code for the process's life: importing client-node alone costs a
// process ~80 MiB RSS. Bundled, unused API classes are dropped and the rest is minified: the worker
// role imports in 119 MiB instead of 180, the watcher in 95 instead of 151 (measured on Node 24).
// Every other package stays external and loads from node_modules as it would from source: some
// read files beside their own code at run time (etcd3's .proto files, bull-board's UI, pino's
// transport workers), which a bundle would break, and none of them is large enough to matter.
// Tests run the sources; tests/bundle.test.ts runs this bundle end to end.
import { copyFileSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { buildMallocTrimAddon } from "./native/build.ts";

const ROOT = join(import.meta.dirname, "..");
/** The only package bundled: the one whose generated code is most of a process's memory. */
const BUNDLED_PACKAGES = new Set(["@kubernetes/client-node"]);

export interface BundleResult {
  entry: string;
  bytes: number;
  files: number;
  /** dist/native/malloc-trim.node, or why the bundle has no malloc_trim (infra/malloc-trim.ts). */
  mallocTrim: { path: string } | { reason: string };
}

/** Bundles the operator into `outdir` (default dist/); returns the entry's path and the size. */
export async function buildOperatorBundle(outdir = join(ROOT, "dist")): Promise<BundleResult> {
  const manifest: unknown = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  const dependencies =
    typeof manifest === "object" && manifest !== null && "dependencies" in manifest
      ? Object.keys(manifest.dependencies ?? {})
      : [];
  // A fresh directory each time: chunk names carry a content hash, and stale chunks from earlier
  // builds would otherwise pile up beside the new ones (and into an image built from dist/).
  rmSync(outdir, { recursive: true, force: true });
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: [join(ROOT, "infra", "operator.ts")],
    outdir,
    bundle: true,
    splitting: true,
    // Whitespace and syntax only: identifiers and function names stay, so stack traces read as
    // the sources do (the savings are from the classes dropped, not from shorter names). Source
    // maps beside the bundle map a trace to the TypeScript line with NODE_OPTIONS=--enable-source-maps.
    minifyWhitespace: true,
    minifySyntax: true,
    keepNames: true,
    sourcemap: "linked",
    platform: "node",
    target: "node22",
    format: "esm",
    external: dependencies.filter((name) => !BUNDLED_PACKAGES.has(name)),
    // client-node's CommonJS dependencies call require() for Node's built-ins.
    banner: {
      js: 'import { createRequire as __createRequire } from "node:module"; const require = __createRequire(import.meta.url);',
    },
    metafile: true,
    logLevel: "warning",
  });
  const outputs = Object.entries(result.metafile.outputs).filter(([path]) => path.endsWith(".js"));
  return {
    entry: join(outdir, "operator.js"),
    bytes: outputs.reduce((sum, [, output]) => sum + output.bytes, 0),
    files: outputs.length,
    mallocTrim: copyMallocTrimAddon(outdir),
  };
}

/** The bundle loads the addon from dist/native/ as the sources do from infra/native/. */
function copyMallocTrimAddon(outdir: string): BundleResult["mallocTrim"] {
  const addon = buildMallocTrimAddon();
  if (addon.path === undefined) return { reason: addon.reason };
  const path = join(outdir, "native", "malloc-trim.node");
  mkdirSync(join(outdir, "native"), { recursive: true });
  copyFileSync(addon.path, path);
  return { path };
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { outdir: { type: "string", default: join(ROOT, "dist") } } });
  const started = Date.now();
  const bundle = await buildOperatorBundle(values.outdir);
  process.stderr.write(
    `bundled ${relative(process.cwd(), bundle.entry)}: ${bundle.files} files, ${(bundle.bytes / 1024 / 1024).toFixed(1)} MiB, in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
  );
  if ("reason" in bundle.mallocTrim)
    process.stderr.write(`without malloc_trim: ${bundle.mallocTrim.reason}\n`);
}

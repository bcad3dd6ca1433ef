// Which code the benchmarks' operator processes run: the bundle the image runs (infra/bundle.ts),
// built fresh into dist/, unless BENCH_FROM_SOURCE=1 asks for the TypeScript sources as tests run
// them (to compare the two, or to profile with source positions).
import { buildOperatorBundle } from "../infra/bundle.ts";
import { SOURCE_ENTRY } from "../tests/helpers/operator-processes.ts";

export interface OperatorBuild {
  entry: string;
  /** Printed with the figures, so a reader knows what was measured. */
  build: "bundle" | "source";
}

export async function operatorBuild(progress: (line: string) => void): Promise<OperatorBuild> {
  if (process.env.BENCH_FROM_SOURCE === "1") return { entry: SOURCE_ENTRY, build: "source" };
  const bundle = await buildOperatorBundle();
  progress(`operator bundled: ${bundle.entry} (${(bundle.bytes / 1024 / 1024).toFixed(1)} MiB)`);
  if ("reason" in bundle.mallocTrim)
    progress(`the bundle runs without malloc_trim: ${bundle.mallocTrim.reason}`);
  return { entry: bundle.entry, build: "bundle" };
}

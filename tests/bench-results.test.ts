// The benchmark page shows what bench/results holds: docs/benchmarks.md's figures section is what
// bench/render.ts makes of the saved runs, and every saved run says where and on what it ran.
import { readFileSync } from "node:fs";
import t from "tap";
import { formattedPage, PAGE, renderFigures, renderPage } from "../bench/render.ts";
import { readResults } from "../bench/results.ts";

t.test("docs/benchmarks.md's figures are what bench/results gives", async (t) => {
  const page = readFileSync(PAGE, "utf8");
  t.equal(page, formattedPage(renderPage(page)), "current (else run node bench/render.ts)");
});

t.test("every saved run names its commit, machine and scenarios", async (t) => {
  const files = readResults();
  t.ok(files.length > 0, `${files.length} saved runs`);
  for (const file of files) {
    const name = `${file.bench}${file.variant ? ` (${file.variant})` : ""}`;
    t.match(file.commit, /^[0-9a-f]{40}$/, `${name}: a commit`);
    t.ok(file.machine.cpus > 0 && file.machine.memoryGiB > 0, `${name}: the machine`);
    t.ok(file.results.length > 0, `${name}: its scenarios`);
    for (const result of file.results) {
      t.ok(
        renderFigures([file]).includes(`\`${String(result.scenario)}\``),
        `${name}: ${result.scenario} shown`,
      );
    }
  }
});

t.test("a failed goal is shown as failed", async (t) => {
  const figures = renderFigures([
    {
      bench: "convergence",
      variant: "",
      commit: "0".repeat(40),
      dirty: false,
      machine: { cpus: 2, cpuModel: "cpu", memoryGiB: 24, kernel: "6", node: "v24" },
      finishedAt: "2026-01-01T00:00:00.000Z",
      results: [
        {
          scenario: "create",
          operatorMs: { median: 3000, min: 2900, max: 3100 },
          referenceMs: { median: 2000, min: 1900, max: 2100 },
          ratio: 1.5,
          goal: 1.25,
        },
      ],
    },
  ]);
  t.match(
    figures,
    /\| `create` \| 3\.00 s \(2\.90–3\.10\) \| 2\.00 s \(1\.90–2\.10\) \| 1\.5 \| ≤ 1\.25 \| \*\*no\*\* \|/,
  );
});

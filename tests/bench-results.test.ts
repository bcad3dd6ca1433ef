// The benchmark page shows what bench/results holds: docs/benchmarks.md's figures section is what
// bench/render.ts makes of the saved runs, and every saved run says where and on what it ran.
import { readFileSync } from "node:fs";
import t from "tap";
import { renderChart } from "../bench/chart.ts";
import { CHART, formattedPage, PAGE, renderFigures, renderPage } from "../bench/render.ts";
import { readResults } from "../bench/results.ts";

t.test("docs/benchmarks.md's figures are what bench/results gives", async (t) => {
  const page = readFileSync(PAGE, "utf8");
  t.equal(page, formattedPage(renderPage(page)), "current (else run node bench/render.ts)");
  t.equal(readFileSync(CHART, "utf8"), renderChart(readResults()), "docs/benchmarks.svg current");
  t.match(page, "](benchmarks.svg)", "the page shows the chart");
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

const machine = { cpus: 2, cpuModel: "cpu", memoryGiB: 24, kernel: "6", node: "v24" };

t.test("a goal of its own is met only when every run meets it", async (t) => {
  const file = {
    bench: "control",
    variant: "",
    commit: "0".repeat(40),
    dirty: false,
    machine,
    finishedAt: "2026-01-01T00:00:00.000Z",
    results: [
      {
        scenario: "control",
        reconcilesPerSecondPerWorker: { median: 400, min: 290, max: 450 },
        goalPerWorker: 300,
        queueWaitMs: { p99: { median: 12, min: 9, max: 30 } },
        goalP99Ms: 20,
        rssMiB: { watcher: 120, workers: [130, 140] },
        goalRssMiB: 150,
      },
    ],
  };
  const figures = renderFigures([file]);
  t.match(
    figures,
    /reconciles per second per worker \| 400\.0 \/s \(290\.0–450\.0\) \| ≥ 300 \/s \| \*\*no\*\*/,
  );
  t.match(figures, /queue wait p99 \(per run\) \| 12\.0 ms \(9\.0–30\.0\) \| ≤ 20 ms \| \*\*no\*\*/);
  t.match(figures, /worker RSS \(per worker\) \| 140\.0 MiB \(130\.0–140\.0\) \| ≤ 150 MiB \| yes/);
  t.match(figures, /watcher RSS \| 120\.0 MiB \(120\.0–120\.0\) \| ≤ 150 MiB \| yes/);
});

t.test("the chart draws one bar per ratio, coloured by its goal", async (t) => {
  const ratio = (scenario: string, value: number) => ({
    scenario,
    operatorMs: { median: 1000 * value, min: 900, max: 1100 },
    referenceMs: { median: 1000, min: 900, max: 1100 },
    ratio: value,
    goal: 1.25,
  });
  const svg = renderChart([
    {
      bench: "convergence",
      variant: "3 real nodes",
      commit: "0".repeat(40),
      dirty: false,
      machine,
      finishedAt: "2026-01-01T00:00:00.000Z",
      results: [ratio("create", 0.9), ratio("heal", 1.6), ratio("heal", 12)],
    },
  ]);
  t.match(svg, /^<svg /, "an SVG");
  t.equal(svg.match(/<rect x=/g)?.length, 3, "three bars");
  t.match(
    svg,
    /<rect x="500" y="\d+" width="420" [^>]*\/>\n[^\n]*\n<text[^>]*>▶ 12</,
    "a ratio past the axis stops at its edge, labelled",
  );
  t.match(svg, "convergence (3 real nodes): create");
  t.match(svg, /fill="#2e7d32"[^\n]*\n[^\n]*\n<text[^>]*>0\.9</, "the met ratio in green");
  t.match(svg, /fill="#c62828"[^\n]*\n[^\n]*\n<text[^>]*>1\.6</, "the missed one in red");
});

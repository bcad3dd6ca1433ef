// The benchmark page's chart: every saved ratio (the operator's median time over the reference's,
// measured in the same run) as a horizontal bar, with its goal marked on the bar's row and the line
// where both take as long. An SVG written as text, so that it diffs and needs no renderer.

import { met, type RatioRow, rows } from "./figures.ts";
import type { ResultsFile } from "./results.ts";

const ROW = 26;
const LABEL = 500;
const PLOT = 420;
const TOP = 40;
const BOTTOM = 36;
const AXIS_LIMIT = 3;

const xmlText = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const fixed = (n: number) => Number(n.toFixed(1));

interface Bar {
  label: string;
  row: RatioRow;
}

function bars(files: ResultsFile[]): Bar[] {
  return files.flatMap((file) =>
    rows(file)
      .filter((row): row is RatioRow => row.kind === "ratio")
      .map((row) => ({
        label: `${file.bench}${file.variant ? ` (${file.variant})` : ""}: ${row.scenario.replace(/`/g, "")}`,
        row,
      })),
  );
}

/** The chart as SVG text; a chart with no bars says that there are no saved ratios. */
export function renderChart(files: ResultsFile[]): string {
  const all = bars(files);
  const top = Math.max(1.5, ...all.map((b) => Math.max(b.row.ratio, b.row.goal)));
  // Up to 3: a ratio far beyond its goal (a slow test server's) would squash every other bar; its
  // bar stops at the edge and its label says how far it goes.
  const max = Math.min(AXIS_LIMIT, Math.ceil(top * 4) / 4);
  const x = (ratio: number) => fixed(LABEL + (Math.min(ratio, max) / max) * PLOT);
  const height = TOP + Math.max(all.length, 1) * ROW + BOTTOM;
  const width = LABEL + PLOT + 60;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    "<title>Each saved benchmark ratio (operator over reference) against its goal</title>",
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="8" y="18" font-size="13" font-weight="bold">Operator time over reference time (median of each run's samples; shorter is better)</text>`,
    `<text x="8" y="33" fill="#555555">bar: ratio, green when it meets its goal; black tick: the goal; dashed line: as fast as the reference</text>`,
  ];
  all.forEach((bar, i) => {
    const y = TOP + i * ROW;
    const colour = met(bar.row) ? "#2e7d32" : "#c62828";
    out.push(
      `<text x="${LABEL - 8}" y="${y + 17}" text-anchor="end">${xmlText(bar.label)}</text>`,
      `<rect x="${LABEL}" y="${y + 5}" width="${fixed(x(bar.row.ratio) - LABEL)}" height="${ROW - 10}" fill="${colour}"/>`,
      `<line x1="${x(bar.row.goal)}" x2="${x(bar.row.goal)}" y1="${y + 2}" y2="${y + ROW - 2}" stroke="#000000" stroke-width="2"/>`,
      `<text x="${Math.max(x(bar.row.ratio), x(bar.row.goal)) + 5}" y="${y + 17}">${bar.row.ratio > max ? "▶ " : ""}${bar.row.ratio}</text>`,
    );
  });
  if (all.length === 0) out.push(`<text x="${LABEL}" y="${TOP + 17}">no saved ratios</text>`);
  const axis = TOP + Math.max(all.length, 1) * ROW;
  out.push(
    `<line x1="${x(1)}" x2="${x(1)}" y1="${TOP}" y2="${axis}" stroke="#555555" stroke-dasharray="4 3"/>`,
    `<line x1="${LABEL}" x2="${LABEL + PLOT}" y1="${axis}" y2="${axis}" stroke="#000000"/>`,
  );
  for (let tick = 0; tick <= max + 1e-9; tick += 0.25) {
    const label = Number.isInteger(tick * 2)
      ? `<text x="${x(tick)}" y="${axis + 16}" text-anchor="middle">${tick}</text>`
      : "";
    out.push(
      `<line x1="${x(tick)}" x2="${x(tick)}" y1="${axis}" y2="${axis + 4}" stroke="#000000"/>${label}`,
    );
  }
  out.push("</svg>", "");
  return out.join("\n");
}

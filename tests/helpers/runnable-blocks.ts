// The shell blocks of the documentation that a reader can run as they are, for
// tests/docs-runnable.test.ts. A page marks such a block with the HTML comment `<!-- runnable -->`
// on the line before its fence; it may show what the block prints in a fenced block marked
// `<!-- output -->` that follows it with no other block between. Pure: the test runs the blocks.
import { posix } from "node:path";
import { links } from "./markdown-links.ts";

export const RUNNABLE_MARK = "<!-- runnable -->";
export const OUTPUT_MARK = "<!-- output -->";
/** In an expected output line: any text (an age, a generated name). */
export const ANY_TEXT = "...";

export interface RunnableBlock {
  /** The page, as the caller named it. */
  page: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The fence's info string ("sh", "bash"). */
  language: string;
  code: string;
  /** What the page shows the block printing, if it shows it. */
  expectedOutput?: string;
}

interface Fence {
  marker: string;
  indent: number;
  info: string;
}

const FENCE = /^( {0,3})(`{3,}|~{3,})(.*)$/;

function openingFence(line: string): Fence | undefined {
  const match = FENCE.exec(line);
  if (!match) return undefined;
  const [, indent = "", marker = "", info = ""] = match;
  // A backtick fence's info string cannot hold a backtick (CommonMark).
  if (marker.startsWith("`") && info.includes("`")) return undefined;
  return { marker, indent: indent.length, info: info.trim() };
}

function closes(line: string, fence: Fence): boolean {
  const match = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(line);
  const marker = match?.[1];
  return marker !== undefined && marker[0] === fence.marker[0] && marker.length >= fence.marker.length;
}

/** A content line without the fence's own indentation (CommonMark strips up to that much). */
function unindent(line: string, indent: number): string {
  let cut = 0;
  while (cut < indent && line[cut] === " ") cut++;
  return line.slice(cut);
}

/**
 * The runnable blocks of one page, in the order they appear. A mark that no fence follows on the
 * next line, or an output mark with no runnable block before it (or another block between), is an
 * error in the page and throws with its line.
 */
export function runnableBlocks(page: string, text: string): RunnableBlock[] {
  const lines = text.split("\n");
  const blocks: RunnableBlock[] = [];
  // The runnable block an output mark may still belong to: none once another block came between.
  let lastRunnable: RunnableBlock | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? "";
    const mark = line.trim();
    const fence = openingFence(line);
    if (mark === RUNNABLE_MARK || mark === OUTPUT_MARK) {
      const next = openingFence(lines[i + 1] ?? "");
      if (!next) throw new Error(`${page}:${i + 1}: ${mark} must be followed by a fenced block`);
      continue;
    }
    if (!fence) continue;
    const body: string[] = [];
    let end = i + 1;
    while (end < lines.length && !closes(lines[end] ?? "", fence)) {
      body.push(unindent(lines[end] ?? "", fence.indent));
      end++;
    }
    const before = (lines[i - 1] ?? "").trim();
    const code = body.join("\n");
    if (before === RUNNABLE_MARK) {
      lastRunnable = { page, line: i + 1, language: fence.info.split(/\s+/)[0] ?? "", code };
      blocks.push(lastRunnable);
    } else if (before === OUTPUT_MARK) {
      if (!lastRunnable) {
        throw new Error(
          `${page}:${i}: ${OUTPUT_MARK} follows no runnable block (or another block came between)`,
        );
      }
      lastRunnable.expectedOutput = code;
      lastRunnable = undefined;
    } else {
      lastRunnable = undefined;
    }
    i = end;
  }
  return blocks;
}

/**
 * The order pages are run in: the pages an index links to, in the order it links them (the order
 * a reader follows), then every other page by path. `index` and the pages are paths from the
 * repository's root; links are resolved from the index's folder.
 */
export function pageOrder(index: string, indexText: string, pages: readonly string[]): string[] {
  const known = new Set(pages);
  const linked: string[] = [];
  for (const link of links(indexText)) {
    const target = link.target.split("#")[0] ?? "";
    if (target === "") continue;
    const page = posix.normalize(posix.join(posix.dirname(index), target));
    if (known.has(page) && !linked.includes(page)) linked.push(page);
  }
  const rest = pages.filter((p) => !linked.includes(p)).sort();
  return [...linked, ...rest];
}

function normalized(line: string): string {
  return line.trim().replace(/\s+/g, " ");
}

function escaped(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * Why `actual` is not the output a page shows, or undefined when it is: line by line, with runs of
 * spaces counted as one (kubectl pads its columns to their widest value) and `...` standing for
 * any text within a line; blank lines at either end do not count.
 */
export function outputMismatch(actual: string, expected: string): string | undefined {
  const lines = (text: string) =>
    text
      .replace(/^\s*\n|\s+$/g, "")
      .split("\n")
      .map(normalized);
  const got = lines(actual);
  const want = lines(expected);
  if (got.length !== want.length) {
    return `${got.length} line(s) printed, the page shows ${want.length}:\n${got.join("\n")}`;
  }
  for (const [i, pattern] of want.entries()) {
    const regex = new RegExp(`^${pattern.split(ANY_TEXT).map(escaped).join(".*")}$`);
    const line = got[i] ?? "";
    if (!regex.test(line)) return `line ${i + 1} is "${line}", the page shows "${pattern}"`;
  }
  return undefined;
}

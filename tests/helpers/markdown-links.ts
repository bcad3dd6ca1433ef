// Links and headings of Markdown pages as GitHub reads them, for tests/docs-links.test.ts: the
// links a page makes outside code (inline links and images, reference definitions, HTML href and
// src), and the anchors its headings get (GitHub's rule: lowercase, every character that is not a
// letter, mark, digit, "_", "-" or space removed, spaces to "-", "-1", "-2", … for repeats).

import { posix } from "node:path";

export interface Link {
  target: string;
  line: number;
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})/;

/**
 * The page with fenced code blocks, code spans and HTML comments blanked out, lines kept (so line
 * numbers stay right): a link or heading shown as code is not one.
 */
export function withoutCode(text: string): string[] {
  let fence: string | undefined;
  return text.split("\n").map((line) => {
    const opening = FENCE.exec(line)?.[1];
    if (fence !== undefined) {
      if (opening !== undefined && opening[0] === fence[0] && opening.length >= fence.length)
        fence = undefined;
      return "";
    }
    if (opening) {
      fence = opening;
      return "";
    }
    return line.replace(/(`+)[^`][\s\S]*?\1/g, (m) => " ".repeat(m.length)).replace(/<!--.*?-->/g, "");
  });
}

const INLINE = /(?<!\\)!?\[(?:[^\]\\]|\\.)*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)/g;
const DEFINITION = /^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)/;
const HTML = /\b(?:href|src)\s*=\s*"([^"]*)"/g;

/** Every link of the page, with its line (1-based). */
export function links(text: string): Link[] {
  const out: Link[] = [];
  withoutCode(text).forEach((line, i) => {
    const add = (target: string | undefined) => {
      if (target) out.push({ target: target.replace(/^<|>$/g, ""), line: i + 1 });
    };
    for (const m of line.matchAll(INLINE)) add(m[1]);
    add(DEFINITION.exec(line)?.[1]);
    for (const m of line.matchAll(HTML)) add(m[1]);
  });
  return out;
}

/** Whether a link leaves the repository's files: a URL with a scheme, or protocol-relative. */
export function isExternal(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith("//");
}

/** GitHub's anchor for a heading's text (before duplicates are numbered). */
export function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}\- ]/gu, "")
    .replace(/ /g, "-");
}

/** A heading's text as GitHub renders it: links and images by their text, HTML tags dropped. */
function headingText(raw: string): string {
  return raw
    .replace(/!?\[((?:[^\]\\]|\\.)*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/\\(.)/g, "$1");
}

/** Every anchor of the page: its headings (ATX and setext) and HTML `id`/`name` attributes. */
export function anchors(text: string): Set<string> {
  const lines = text.split("\n");
  const visible = withoutCode(text);
  const seen = new Map<string, number>();
  const out = new Set<string>();
  const add = (heading: string) => {
    const base = slug(headingText(heading));
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    out.add(count === 0 ? base : `${base}-${count}`);
  };
  visible.forEach((line, i) => {
    // Headings keep their code spans' text, so the raw line is slugged, not the blanked one.
    const raw = lines[i] ?? "";
    const atx = /^\s{0,3}#{1,6}(?:\s+(.*?))?(?:\s+#+)?\s*$/.exec(line);
    if (atx) {
      const rawAtx = /^\s{0,3}#{1,6}(?:\s+(.*?))?(?:\s+#+)?\s*$/.exec(raw);
      add(rawAtx?.[1] ?? "");
    } else if (/^\s{0,3}(=+|-+)\s*$/.test(line) && i > 0) {
      const previous = visible[i - 1] ?? "";
      if (/\S/.test(previous) && !/^\s{0,3}([|#>*+-]|\d+[.)])/.test(previous)) add(lines[i - 1] ?? "");
    }
    for (const m of line.matchAll(/\b(?:id|name)\s*=\s*"([^"]+)"/g)) if (m[1]) out.add(m[1]);
  });
  return out;
}

/** What the link check needs of the repository: which files exist, and a page's anchors. */
export interface Repository {
  has(file: string): boolean;
  anchorsOf(page: string): Set<string>;
}

/**
 * Why a link of `page` (a path from the repository's root) does not resolve, or undefined when it
 * does or leaves the repository by design (a URL).
 */
export function linkProblem(page: string, target: string, repository: Repository): string | undefined {
  if (isExternal(target)) return undefined;
  const hash = target.indexOf("#");
  const path = decodeURIComponent((hash < 0 ? target : target.slice(0, hash)).split("?")[0] ?? "");
  const fragment = hash < 0 ? "" : decodeURIComponent(target.slice(hash + 1));
  const file = (path === "" ? page : posix.normalize(posix.join(posix.dirname(page), path))).replace(
    /\/$/,
    "",
  );
  if (file === ".." || file.startsWith("../") || file.startsWith("/")) return "points outside the repository";
  if (!repository.has(file)) return `no such file in the repository: ${file}`;
  if (fragment === "") return undefined;
  if (!file.endsWith(".md")) return `an anchor into ${file}, which is not a Markdown page`;
  return repository.anchorsOf(file).has(fragment)
    ? undefined
    : `no heading of ${file} has the anchor #${fragment}`;
}

// Markdown pieces of the generated documentation pages (infra/docs): text from schemas and YAML
// comments made safe for a table cell, code spans and tables. Descriptions are written for
// `kubectl explain`, not for Markdown: "<bucket>" would vanish as an HTML tag, "etcd_*" could start
// an emphasis and a "|" would split a table row, so they are escaped here, outside code spans.

/** Characters that change what Markdown text means; `_` only where it could open or close emphasis. */
function escapeText(text: string): string {
  return text
    .replace(/[\\*<[\]|]/g, (c) => `\\${c}`)
    .replace(/_/g, (c, offset: number, whole: string) =>
      /[A-Za-z0-9]/.test(whole[offset - 1] ?? "") && /[A-Za-z0-9]/.test(whole[offset + 1] ?? "")
        ? c
        : `\\${c}`,
    );
}

function escaped(text: string, span: (code: string) => string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  // Odd pieces are the insides of `code spans`; an unpaired backtick is left as text.
  const pieces = flat.split("`");
  if (pieces.length % 2 === 0) return escapeText(flat);
  return pieces.map((piece, i) => (i % 2 === 1 ? span(piece) : escapeText(piece))).join("");
}

/** Text for a table cell: whitespace collapsed, code spans kept as code. */
export function inline(text: string): string {
  return escaped(text, code);
}

/** Text for a line outside tables (a list item, a paragraph). */
export function prose(text: string): string {
  return escaped(text, proseCode);
}

/** A code span outside tables: its text is shown exactly as it is. */
export function proseCode(text: string): string {
  const fence = text.includes("`") ? "``" : "`";
  const pad = fence.length > 1 ? " " : "";
  return `${fence}${pad}${text}${pad}${fence}`;
}

/** A code span in a table cell: a "|" is escaped even there, since a table splits its row on it first. */
export function code(text: string): string {
  return proseCode(text.replace(/\|/g, "\\|"));
}

/** A value as shown in a "default" cell: strings as they are (empty as ""), the rest as JSON. */
export function value(v: unknown): string {
  return code(typeof v === "string" && v !== "" ? v : JSON.stringify(v));
}

/** A table whose cells are Markdown already (Biome pads the columns afterwards). */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const line = (cells: readonly string[]) => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)];
}

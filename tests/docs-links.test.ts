// The documentation's links hold: every relative link in README.md and docs/ names a file of the
// repository (tracked, or new and not ignored) and, with a #fragment, a heading of that page as
// GitHub anchors it. The pages speak of the software only: nothing points outside the repository
// (a relative link climbing out of it, or `../shared`), and "session" appears only in its
// technical senses (a cookie, session affinity), never for a spell of work on the code.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import t from "tap";
import { anchors, isExternal, linkProblem, links, slug, withoutCode } from "./helpers/markdown-links.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

function markdownUnder(dir: string): string[] {
  const full = join(ROOT, dir);
  if (!existsSync(full)) return [];
  return readdirSync(full, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".md"))
    .map((f) => join(dir, f));
}

/** Files git would commit: tracked, plus new ones that are not ignored. */
function repositoryFiles(): Set<string> {
  const out = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z"], {
    cwd: ROOT,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  const files = new Set<string>();
  for (const file of out.split("\0").filter(Boolean)) {
    if (!existsSync(join(ROOT, file))) continue; // deleted in the working tree
    files.add(file);
    // A link to a folder opens its listing on GitHub: a folder holding repository files counts.
    for (let d = dirname(file); d !== "."; d = dirname(d)) files.add(d);
  }
  return files;
}

const pages = ["README.md", ...markdownUnder("docs")];
const files = repositoryFiles();
const anchorCache = new Map<string, Set<string>>();
const anchorsOf = (page: string) => {
  let found = anchorCache.get(page);
  if (!found) {
    found = anchors(readFileSync(join(ROOT, page), "utf8"));
    anchorCache.set(page, found);
  }
  return found;
};

t.test("GitHub's anchors, as the link check computes them", async (t) => {
  t.equal(slug("The HTTP API"), "the-http-api");
  t.equal(slug("`EtcdCluster` spec (v1beta2)"), "etcdcluster-spec-v1beta2");
  t.equal(slug("Upgrades: 3.5 → 3.6, and back"), "upgrades-35--36-and-back", "symbols go, spaces stay");
  t.equal(slug("snake_case and kebab-case"), "snake_case-and-kebab-case");
  t.equal(slug("Élan vital"), "élan-vital", "letters of any script stay");
  const page = "# Title\n\n## Spec\n\n## Spec\n\n```\n# not a heading\n```\n\nSetext\n------\n";
  t.same([...anchors(page)].sort(), ["setext", "spec", "spec-1", "title"]);
  t.same(
    links('[a](x.md) `[b](y.md)` ![c](img.png "t")\n\n[d]: docs/z.md#part\n\\[e](not-a-link)').map(
      (l) => l.target,
    ),
    ["x.md", "img.png", "docs/z.md#part"],
    "links in code and escaped brackets are not links",
  );
});

t.test("a link that does not resolve is named with the reason", async (t) => {
  const repository = {
    has: (file: string) => ["README.md", "docs", "docs/a.md", "docs/b.md", "shared/x.ts"].includes(file),
    anchorsOf: (page: string) => new Set(page === "docs/b.md" ? ["part-one"] : ["top"]),
  };
  const problem = (page: string, target: string) => linkProblem(page, target, repository);
  t.equal(problem("docs/a.md", "b.md#part-one"), undefined);
  t.equal(problem("docs/a.md", "#top"), undefined, "an anchor of the page itself");
  t.equal(problem("README.md", "docs/"), undefined, "a folder");
  t.equal(problem("README.md", "https://example.com/x.md"), undefined, "a URL is not checked");
  t.equal(problem("docs/a.md", "../shared/x.ts"), undefined, "a file of the repository, from docs/");
  t.match(problem("docs/a.md", "c.md"), /no such file in the repository: docs\/c\.md/);
  t.match(problem("docs/a.md", "b.md#part-two"), /no heading of docs\/b\.md has the anchor #part-two/);
  t.match(problem("docs/a.md", "#nowhere"), /no heading of docs\/a\.md/);
  t.match(problem("README.md", "../shared/notes.md"), /points outside the repository/);
  t.match(problem("docs/a.md", "../../x.md"), /points outside the repository/);
  t.match(problem("README.md", "shared/x.ts#L3"), /not a Markdown page/);
});

t.test("every relative link in README.md and docs/ resolves", async (t) => {
  t.ok(pages.length > 5, `${pages.length} pages`);
  const repository = { has: (file: string) => files.has(file), anchorsOf };
  let checked = 0;
  for (const page of pages) {
    for (const link of links(readFileSync(join(ROOT, page), "utf8"))) {
      if (isExternal(link.target)) continue;
      checked++;
      const problem = linkProblem(page, link.target, repository);
      t.equal(problem, undefined, `${page}:${link.line} → ${link.target}`);
    }
  }
  t.ok(checked > 10, `${checked} relative links`);
});

t.test("the pages point nowhere outside the repository and speak of the software only", async (t) => {
  const all = [...pages, ...markdownUnder("charts")];
  // The technical senses of the word, which a page may use.
  const technical =
    /\bsessions?[ -](?:cookies?|affinity|tokens?|tickets?|resumption)\b|\bsessionAffinity\b/gi;
  for (const page of all) {
    const text = readFileSync(join(ROOT, page), "utf8");
    t.notOk(text.includes("../shared"), `${page}: no path into ../shared`);
    withoutCode(text).forEach((line, i) => {
      const word = /\bsessions?\b/i.exec(line.replace(technical, ""));
      if (word) t.fail(`${page}:${i + 1}: "${word[0]}" names a spell of work, not the software`);
    });
  }
  t.pass(`${all.length} pages read`);
});

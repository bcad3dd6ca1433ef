// docs/install.md's Helm values table is what infra/docs/chart-values.ts makes of the chart's
// values.yaml and values.schema.json: every value with its default, and the prose around the table
// left as people wrote it.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import t from "tap";
import { parse } from "yaml";
import { CHART, END, installPage, PAGE, renderValues, START } from "../infra/docs/chart-values.ts";
import { replaceSection } from "../infra/docs/page.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const page = readFileSync(PAGE, "utf8");
const generated = page.slice(page.indexOf(START), page.indexOf(END));

function cells(path: string): string[] | undefined {
  const line = generated.split("\n").find((l) => l.startsWith(`| \`${path}\` `));
  return line
    ?.split(/(?<!\\)\|/)
    .slice(1, -1)
    .map((c) => c.trim());
}

/** The paths of values.yaml's leaves (scalars, lists, empty maps), read without the generator's code. */
function leaves(value: unknown, prefix = ""): string[] {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return [prefix];
  const entries = Object.entries(value);
  if (entries.length === 0) return [prefix];
  return entries.flatMap(([key, child]) => leaves(child, prefix ? `${prefix}.${key}` : key));
}

t.test("docs/install.md's values table is what the chart gives", async (t) => {
  t.ok(page.includes(START) && page.includes(END), "the markers are there");
  t.equal(page, installPage(page), "current (else run node infra/docs/chart-values.ts)");
  const check = execFileSync(process.execPath, ["infra/docs/chart-values.ts", "--check"], {
    cwd: ROOT,
    encoding: "utf8",
  });
  t.equal(check, "", "--check passes on it, silently");
});

t.test("it sits in the Helm part of the page, with the prose around it kept", async (t) => {
  const helm = page.indexOf("**Helm** (`charts/etcd-operator`");
  t.ok(helm >= 0 && helm < page.indexOf(START), "after the Helm heading");
  t.ok(
    page.indexOf(END) < page.indexOf("`values.schema.json` refuses a wrong scope"),
    "before the schema's note",
  );
  const stale = replaceSection(page, START, END, "| parameter |\n| --- |\n| `gone` |");
  t.not(installPage(stale), stale, "a stale table is rewritten");
  t.equal(installPage(stale), page, "back to the chart's");
});

t.test("the values, with types and defaults", async (t) => {
  t.same(cells("replicas.http")?.slice(0, 3), ["`replicas.http`", "`integer`", "`2`"]);
  t.same(cells("redis.bundled")?.slice(0, 4), ["`redis.bundled`", "`boolean`", "`true`", "required"]);
  t.same(cells("scope")?.slice(0, 3), ["`scope`", "`string`", "`namespaced`"]);
  t.match(cells("scope")?.[3], /one of `namespaced`, `cluster-wide`/);
  t.match(cells("redis.url")?.[3], /matches `\^\$\\\|\^rediss\?:\/\/`/, "a pattern, its | escaped");
  t.match(cells("chaos.level")?.[3], /0 to 10/);
  t.match(cells("keda.listLength")?.[2], /`64`/);
  t.match(
    cells("config.workerConcurrency")?.[4],
    /Clusters reconciled in parallel per worker/,
    "its comment",
  );
});

t.test("every value of values.yaml has its row", async (t) => {
  const values = parse(readFileSync(join(CHART, "values.yaml"), "utf8"));
  const paths = leaves(values);
  t.ok(paths.length > 30, `${paths.length} values`);
  for (const path of paths) t.ok(cells(path), path);
  t.equal(
    renderValues().split("\n").length - 2,
    generated.split("\n").filter((l) => l.startsWith("| `")).length,
  );
});

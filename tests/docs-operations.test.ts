// docs/operations.md names only what the operator has: every metric is one its registries hold
// (and it names them all), every setting is an environment variable the operator reads (or a
// constant of its code), the defaults and ranges in its tables are the ones loadConfig applies,
// and the log lines and Event reasons it lists are in the code. The README links the page.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import t from "tap";
import { worldMetricsRegistry } from "../infra/http/metrics-collectors.ts";
import { OPERATOR_ENV } from "../infra/operator.ts";
import { ConfigError, loadConfig } from "../shared/config.ts";
import { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";
import { operatorMetrics } from "../shared/metrics.ts";
import { offlineKubeConfig } from "./helpers/offline-kube-config.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const page = readFileSync(join(ROOT, "docs", "operations.md"), "utf8");

/** The operator's own code: what runs in its image, not the local control plane or the doc tools. */
function operatorSources(): string {
  const skip = /^infra\/(local|image|docs)\//;
  return ["functions", "shared", "infra"]
    .flatMap((dir) =>
      readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" })
        .filter((f) => f.endsWith(".ts"))
        .map((f) => `${dir}/${f}`),
    )
    .filter((f) => !skip.test(f))
    .map((f) => readFileSync(join(ROOT, f), "utf8"))
    .join("\n");
}
const sources = operatorSources();

/** Every metric a process can export: its own registry and the HTTP server's world gauges. */
function registeredMetrics(): Map<string, string> {
  // Never contacted: the gauges read the cluster only when scraped.
  const kc = offlineKubeConfig();
  const world = worldMetricsRegistry({
    kube: new Kube(kc),
    config: loadConfig({}),
    queues: [],
    log: silentLogger(),
  });
  const metrics = [...operatorMetrics().registry.getMetricsAsArray(), ...world.getMetricsAsArray()];
  return new Map(metrics.map((m) => [m.name, String(m.type)]));
}

/** The environment variables loadConfig reads, found by handing it an environment that records. */
function configVariables(): Set<string> {
  const read = new Set<string>();
  const env = new Proxy<Record<string, string | undefined>>(
    {},
    {
      get(_target, key) {
        if (typeof key === "string") read.add(key);
        return undefined;
      },
    },
  );
  loadConfig(env);
  return read;
}

/** The rows of the table whose header's first cell is `first`, as cells without code marks. */
function tableRows(first: string): string[][] {
  const lines = page.split("\n");
  const start = lines.findIndex((l) => new RegExp(`^\\| ${first} +\\|`).test(l));
  if (start < 0) return [];
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith("|")) break;
    rows.push(
      line
        .split(/(?<!\\)\|/)
        .slice(1, -1)
        .map((c) => c.trim().replace(/^`|`$/g, "")),
    );
  }
  return rows;
}

t.test("every metric named exists, and every metric of the operator is named", async (t) => {
  const metrics = registeredMetrics();
  const named = new Set(page.match(/\b(?:etcd_operator|process|nodejs)_[a-z0-9_]*[a-z0-9]/g) ?? []);
  t.ok(named.size > 15, `${named.size} metric names in the page`);
  for (const name of named) {
    const base = name.replace(/_(bucket|sum|count)$/, "");
    const known = metrics.has(name) || (base !== name && metrics.get(base) === "histogram");
    t.ok(known, `${name} is exported by the operator`);
  }
  for (const name of metrics.keys()) {
    if (name.startsWith("etcd_operator_")) t.ok(named.has(name), `${name} is described`);
  }
});

t.test("every setting named is one the operator reads, or a constant of its code", async (t) => {
  const variables = configVariables();
  t.ok(
    variables.has("WORKER_CONCURRENCY") && variables.has("CHAOS_LEVEL"),
    "the recorder sees loadConfig's reads",
  );
  const exported = new Set([...sources.matchAll(/export const ([A-Z][A-Z0-9_]*)\b/g)].map((m) => m[1]));
  const environment = new Set([...variables, ...Object.keys(OPERATOR_ENV)]);
  const named = new Set(
    page.match(/(?<![A-Za-z0-9_])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+_?(?![A-Za-z0-9_])/g) ?? [],
  );
  t.ok(named.size > 15, `${named.size} names in the page`);
  for (const name of named) {
    t.ok(
      environment.has(name) || exported.has(name),
      `${name} is read by the operator or defined in its code`,
    );
  }
});

t.test("the settings tables give loadConfig's defaults and ranges", async (t) => {
  const rows = tableRows("variable");
  t.ok(rows.length >= 12, `${rows.length} settings`);
  const defaults = loadConfig({});
  const refuses = (name: string, value: number) => {
    try {
      loadConfig({ [name]: String(value) });
      return false;
    } catch (error) {
      return error instanceof ConfigError;
    }
  };
  for (const [name = "", shownDefault = "", shownRange = ""] of rows) {
    t.same(loadConfig({ [name]: shownDefault }), defaults, `${name}: ${shownDefault} is its default`);
    const range = /^(\d+)–(\d+)$/.exec(shownRange);
    if (!range) {
      t.fail(`${name}: the range "${shownRange}" is not "min–max"`);
      continue;
    }
    const [min, max] = [Number(range[1]), Number(range[2])];
    t.ok(!refuses(name, min) && !refuses(name, max), `${name}: ${min} and ${max} are taken`);
    t.ok(refuses(name, min - 1) && refuses(name, max + 1), `${name}: ${min - 1} and ${max + 1} are refused`);
  }
});

t.test("the log lines and Event reasons listed are the operator's", async (t) => {
  const messages = tableRows("message");
  t.ok(messages.length > 10, `${messages.length} log lines`);
  for (const [message = ""] of messages) t.ok(sources.includes(message), `log line "${message}"`);
  const reasons = tableRows("reason");
  t.ok(reasons.length > 10, `${reasons.length} Event reasons`);
  for (const [reason = ""] of reasons) {
    const warning = new RegExp(`"Warning"(?: as const)?,\\s*(?:reason: )?"${reason}"`);
    t.ok(warning.test(sources), `${reason} is a Warning Event of the operator`);
  }
});

t.test("the README lists the page", async (t) => {
  t.match(
    readFileSync(join(ROOT, "README.md"), "utf8"),
    /\| \[docs\/operations\.md\]\(docs\/operations\.md\) +\|/,
  );
});

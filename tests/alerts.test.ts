// The shipped alerts (infra/alerts.ts) as Prometheus sees them: the chart's template and the kustomize
// component are what the generator writes, Helm renders the same rules as the component holds,
// `promtool check rules` accepts them, every metric they read exists and every alert has its runbook
// in docs/operations.md; then `promtool test rules` runs a unit test of each alert with input series
// that fire it and series that do not, asserting the alerts' labels and annotations.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import t from "tap";
import { parse, stringify } from "yaml";
import { ALERT_GROUPS, type AlertRule, alertFiles, COMPONENT_DIR } from "../infra/alerts.ts";
import { worldMetricsRegistry } from "../infra/http/metrics-collectors.ts";
import { ensureAssets, PROMTOOL_VERSION } from "../infra/local/assets.ts";
import { ensureHelm } from "../infra/local/helm.ts";
import { loadConfig } from "../shared/config.ts";
import { Kube } from "../shared/kube.ts";
import { silentLogger } from "../shared/log.ts";
import { operatorMetrics } from "../shared/metrics.ts";
import { anchors } from "./helpers/markdown-links.ts";
import { offlineKubeConfig } from "./helpers/offline-kube-config.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
// No skip when promtool is missing: it is built here from its Go module, as the set-up does.
const { promtool } = (await ensureAssets({ only: ["promtool"], log: (line) => t.comment(line) })).promtool;
const helm = await ensureHelm({ log: (line) => t.comment(line) });

const RULES: AlertRule[] = ALERT_GROUPS.flatMap((g) => g.rules);
const work = mkdtempSync(join(tmpdir(), "alerts-test-"));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

interface PrometheusRule {
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec: { groups: unknown[] };
}
const component = parse(readFileSync(join(COMPONENT_DIR, "prometheusrule.yaml"), "utf8")) as PrometheusRule;
const rulesFile = join(work, "rules.yaml");
writeFileSync(rulesFile, stringify(component.spec));

function run(command: string, args: string[]) {
  const result = spawnSync(command, args, { cwd: work, encoding: "utf8" });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

t.test("the chart template and the kustomize component are what infra/alerts.ts writes", async (t) => {
  for (const [path, render] of Object.entries(alertFiles())) {
    t.equal(readFileSync(path, "utf8"), render(), `${path.slice(ROOT.length)} is current`);
  }
  const check = execFileSync(process.execPath, ["infra/alerts.ts", "--check"], {
    cwd: ROOT,
    encoding: "utf8",
  });
  t.equal(check, "", "--check passes, silently");
  t.same(
    component.spec,
    JSON.parse(JSON.stringify({ groups: ALERT_GROUPS })),
    "the component holds the rules",
  );
});

t.test("helm renders the component's rules, with their {{ }} left to Prometheus", async (t) => {
  const template = (values: string[]) => {
    const args = ["template", "eop", "charts/etcd-operator", "-n", "etcd", ...values];
    const result = spawnSync(helm, args, { cwd: ROOT, encoding: "utf8" });
    t.equal(result.status, 0, `helm ${args.join(" ")}${result.status === 0 ? "" : `: ${result.stderr}`}`);
    return (result.stdout ?? "")
      .split(/^---$/m)
      .map((doc) => parse(doc) as PrometheusRule | null)
      .filter((doc): doc is PrometheusRule => doc?.kind === "PrometheusRule");
  };
  t.same(template([]), [], "none by default");
  const [rendered, ...more] = template([
    "--set",
    "prometheusRule.enabled=true,prometheusRule.labels.release=kps",
  ]);
  t.equal(more.length, 0, "one PrometheusRule");
  t.same(rendered?.spec, component.spec, "the same rules as the kustomize component");
  t.match(rendered?.metadata, {
    name: "eop-etcd-operator",
    labels: { release: "kps", "app.kubernetes.io/instance": "eop" },
  });
  t.match(
    stringify(rendered?.spec),
    /\{\{ \$labels\.cluster \}\}/,
    "Prometheus's templates reach it as they are",
  );
});

t.test("promtool check rules accepts them, lint included", async (t) => {
  const version = run(promtool, ["--version"]);
  t.match(version.output, `promtool, version ${PROMTOOL_VERSION}`);
  const check = run(promtool, ["check", "rules", "--lint=all", "--lint-fatal", rulesFile]);
  t.equal(check.status, 0, check.output);
  t.match(check.output, `SUCCESS: ${RULES.length} rules found`);
});

t.test("each alert has a severity, a summary, a description and its runbook section", async (t) => {
  const headings = anchors(readFileSync(join(ROOT, "docs", "operations.md"), "utf8"));
  t.equal(new Set(RULES.map((r) => r.alert)).size, RULES.length, "names are unique");
  for (const rule of RULES) {
    t.ok(["critical", "warning"].includes(rule.labels.severity), `${rule.alert}: severity`);
    t.ok(rule.annotations.summary && rule.annotations.description, `${rule.alert}: summary, description`);
    const [page, anchor = ""] = rule.annotations.runbook.split("#");
    t.equal(page, "docs/operations.md", `${rule.alert}: runbook page`);
    t.ok(headings.has(anchor), `${rule.alert}: docs/operations.md has #${anchor}`);
  }
});

t.test("they read only metrics that exist", async (t) => {
  const world = worldMetricsRegistry({
    kube: new Kube(offlineKubeConfig()),
    config: loadConfig({}),
    queues: [],
    log: silentLogger(),
  });
  const operator = new Set(
    [...operatorMetrics().registry.getMetricsAsArray(), ...world.getMetricsAsArray()].map((m) => m.name),
  );
  // etcd's own, from scraping the members (etcd 3.5 and later serve both).
  const etcd = new Set(["etcd_mvcc_db_total_size_in_bytes", "etcd_server_quota_backend_bytes"]);
  const used = new Set(RULES.flatMap((r) => r.expr.match(/\betcd_[a-z_]+[a-z]\b/g) ?? []));
  t.ok(used.size >= 12, `${used.size} metrics`);
  for (const name of used) t.ok(operator.has(name) || etcd.has(name), `${name} exists`);
  for (const name of ["backup_interval_seconds", "backup_verification_succeeded", "restore_succeeded"]) {
    t.ok(operator.has(`etcd_operator_${name}`), `the new gauge etcd_operator_${name}`);
  }
});

// ---------------------------------------------------------------------------------------------------------
// promtool unit tests: one group of input series per alert, evaluated at times where it fires and where
// it does not (the condition false, or true for less than its `for`).

interface Series {
  series: string;
  values: string;
}

interface AlertCase {
  eval_time: string;
  alertname: string;
  exp_alerts: { exp_labels: Record<string, string>; exp_annotations: Record<string, string> }[];
}

interface UnitTest {
  alert: string;
  input: Series[];
  cases: AlertCase[];
}

const byName = new Map(RULES.map((r) => [r.alert, r]));

/** The series as both HTTP replicas serve it (the world's gauges come from each one). */
function fromReplicas(metric: string, labels: string, values: string, other = values): Series[] {
  return [
    { series: `${metric}{${labels},pod="eop-http-a",instance="10.1.0.7:8443"}`, values },
    { series: `${metric}{${labels},pod="eop-http-b",instance="10.1.0.8:8443"}`, values: other },
  ];
}

/**
 * The alert as it must fire: its labels with the severity, and its annotations with Prometheus's
 * templates filled in from the labels, and `{{ $value … }}` by `value` (as Prometheus prints it).
 */
function fired(alert: string, labels: Record<string, string>, value = "") {
  const rule = byName.get(alert);
  if (!rule) throw new Error(`no alert ${alert}`);
  const fill = (text: string) =>
    text
      .replace(/\{\{ \$labels\.(\w+) \}\}/g, (_, name: string) => labels[name] ?? "")
      .replace(/\{\{ \$value[^}]*\}\}/g, value);
  const annotations = Object.fromEntries(Object.entries(rule.annotations).map(([k, v]) => [k, fill(v)]));
  return { exp_labels: { ...labels, severity: rule.labels.severity }, exp_annotations: annotations };
}

const at = (eval_time: string, alertname: string, ...exp_alerts: AlertCase["exp_alerts"]): AlertCase => ({
  eval_time,
  alertname,
  exp_alerts,
});

const cluster = (name: string) => `namespace="db",cluster="${name}"`;
const backup = (name: string) => `namespace="db",backup="${name}"`;

const CLUSTER_GAUGES = [
  ["members", "etcd_operator_cluster_members"],
  ["desired", "etcd_operator_cluster_desired_members"],
  ["ready", "etcd_operator_cluster_ready_members"],
  ["available", "etcd_operator_cluster_available"],
] as const;

/** A cluster's gauges (`members`: its voting members, `desired`: spec.size), from both replicas. */
function clusterGauges(name: string, values: Record<(typeof CLUSTER_GAUGES)[number][0], string>): Series[] {
  return CLUSTER_GAUGES.flatMap(([key, metric]) => fromReplicas(metric, cluster(name), values[key]));
}

const UNIT_TESTS: UnitTest[] = [
  {
    alert: "EtcdClusterUnavailable",
    input: [
      ...fromReplicas("etcd_operator_cluster_available", cluster("down"), "1 1 0x10"),
      ...fromReplicas("etcd_operator_cluster_available", cluster("fine"), "1x12"),
    ],
    cases: [
      at("3m", "EtcdClusterUnavailable"),
      at(
        "5m",
        "EtcdClusterUnavailable",
        fired("EtcdClusterUnavailable", { namespace: "db", cluster: "down" }),
      ),
    ],
  },
  {
    alert: "EtcdClusterQuorumAtRisk",
    input: [
      // One of three voters down.
      ...clusterGauges("degraded", { members: "3x12", desired: "3x12", ready: "3 2x11", available: "1x12" }),
      // Every voter ready, but spec.size asks for more.
      ...clusterGauges("short", { members: "3x12", desired: "5x12", ready: "3x12", available: "1x12" }),
      // Not Available: EtcdClusterUnavailable's, not this one's.
      ...clusterGauges("down", { members: "3x12", desired: "3x12", ready: "1x12", available: "0x12" }),
      ...clusterGauges("whole", { members: "3x12", desired: "3x12", ready: "3x12", available: "1x12" }),
    ],
    cases: [
      at("4m", "EtcdClusterQuorumAtRisk"),
      at(
        "10m",
        "EtcdClusterQuorumAtRisk",
        fired("EtcdClusterQuorumAtRisk", { namespace: "db", cluster: "degraded" }, "2"),
        fired("EtcdClusterQuorumAtRisk", { namespace: "db", cluster: "short" }, "3"),
      ),
    ],
  },
  {
    alert: "EtcdClusterMembersUnhealthy",
    input: [
      ...fromReplicas("etcd_operator_cluster_desired_members", cluster("degraded"), "3x25"),
      ...fromReplicas("etcd_operator_cluster_ready_members", cluster("degraded"), "3 2x24"),
      ...fromReplicas("etcd_operator_cluster_desired_members", cluster("whole"), "3x25"),
      // A replica that saw a member down for a moment: the other saw them all.
      ...fromReplicas("etcd_operator_cluster_ready_members", cluster("whole"), "3 2x24", "3x25"),
    ],
    cases: [
      at("10m", "EtcdClusterMembersUnhealthy"),
      at(
        "20m",
        "EtcdClusterMembersUnhealthy",
        fired("EtcdClusterMembersUnhealthy", { namespace: "db", cluster: "degraded" }, "2"),
      ),
    ],
  },
  {
    alert: "EtcdClusterNoSpace",
    input: [
      ...fromReplicas("etcd_operator_cluster_no_space", cluster("full"), "0 0 1x10"),
      // Recovered by the operator within a minute.
      ...fromReplicas("etcd_operator_cluster_no_space", cluster("recovered"), "0 1 0x10"),
    ],
    cases: [
      at("4m", "EtcdClusterNoSpace"),
      at("10m", "EtcdClusterNoSpace", fired("EtcdClusterNoSpace", { namespace: "db", cluster: "full" })),
    ],
  },
  {
    alert: "EtcdDatabaseNearQuota",
    input: [
      // What a PodMonitor on the members gives: etcd's own metrics, per member.
      ...["0", "1"].flatMap((i) => {
        const labels = `instance="10.2.0.${i}:2379",job="etcd-members",namespace="db",pod="main-${i}"`;
        return [
          { series: `etcd_server_quota_backend_bytes{${labels}}`, values: "2000000000x20" },
          {
            series: `etcd_mvcc_db_total_size_in_bytes{${labels}}`,
            values: i === "0" ? "1000000000 1700000000x19" : "1000000000x20",
          },
        ];
      }),
    ],
    cases: [
      at("5m", "EtcdDatabaseNearQuota"),
      at(
        "15m",
        "EtcdDatabaseNearQuota",
        fired(
          "EtcdDatabaseNearQuota",
          { instance: "10.2.0.0:2379", job: "etcd-members", namespace: "db", pod: "main-0" },
          "85%",
        ),
      ),
    ],
  },
  {
    alert: "EtcdBackupTooOld",
    input: [
      // Hourly, last success 7000 s ago and nothing since; replicas scraped a little apart.
      ...fromReplicas("etcd_operator_backup_interval_seconds", backup("hourly"), "3600x20"),
      ...fromReplicas("etcd_operator_backup_age_seconds", backup("hourly"), "7000+60x20", "7010+60x20"),
      // Hourly and on time.
      ...fromReplicas("etcd_operator_backup_interval_seconds", backup("fresh"), "3600x20"),
      ...fromReplicas("etcd_operator_backup_age_seconds", backup("fresh"), "100+60x20"),
      // One-shot: no interval, whatever its age.
      ...fromReplicas("etcd_operator_backup_age_seconds", backup("once"), "999999+60x20"),
    ],
    cases: [
      at("3m", "EtcdBackupTooOld"),
      at(
        "10m",
        "EtcdBackupTooOld",
        fired("EtcdBackupTooOld", { namespace: "db", backup: "hourly" }, "2h 6m 40s"),
      ),
    ],
  },
  {
    alert: "EtcdBackupFailed",
    input: [
      ...fromReplicas("etcd_operator_backup_succeeded", backup("broken"), "1 0x20"),
      ...fromReplicas("etcd_operator_backup_succeeded", backup("good"), "1x20"),
    ],
    cases: [
      at("10m", "EtcdBackupFailed"),
      at("20m", "EtcdBackupFailed", fired("EtcdBackupFailed", { namespace: "db", backup: "broken" })),
    ],
  },
  {
    alert: "EtcdBackupVerificationFailed",
    input: [
      ...fromReplicas("etcd_operator_backup_verification_succeeded", backup("bad"), "1 1 0x5"),
      ...fromReplicas("etcd_operator_backup_verification_succeeded", backup("verified"), "1x7"),
    ],
    cases: [
      at("1m", "EtcdBackupVerificationFailed"),
      at(
        "3m",
        "EtcdBackupVerificationFailed",
        fired("EtcdBackupVerificationFailed", { namespace: "db", backup: "bad" }),
      ),
    ],
  },
  {
    alert: "EtcdRestoreFailed",
    input: [
      // No series while it runs, then Failed.
      ...fromReplicas("etcd_operator_restore_succeeded", 'namespace="db",restore="failed"', "_ _ 0x5"),
      ...fromReplicas("etcd_operator_restore_succeeded", 'namespace="db",restore="completed"', "_ _ 1x5"),
    ],
    cases: [
      at("1m", "EtcdRestoreFailed"),
      at("3m", "EtcdRestoreFailed", fired("EtcdRestoreFailed", { namespace: "db", restore: "failed" })),
    ],
  },
  {
    alert: "EtcdOperatorAbsent",
    input: [
      // Scraped for 5 minutes, then not at all (stale after Prometheus's 5-minute look-back).
      ...fromReplicas("etcd_operator_scrape_source_up", 'source="clusters"', "1x5 _x30"),
    ],
    cases: [
      at("5m", "EtcdOperatorAbsent"),
      at("15m", "EtcdOperatorAbsent"),
      at("25m", "EtcdOperatorAbsent", fired("EtcdOperatorAbsent", { source: "clusters" })),
    ],
  },
  {
    alert: "EtcdOperatorScrapeSourceDown",
    input: [
      // One replica cannot read the restores.
      ...fromReplicas("etcd_operator_scrape_source_up", 'source="restores"', "1 0x20", "1x21"),
      ...fromReplicas("etcd_operator_scrape_source_up", 'source="clusters"', "1x21"),
    ],
    cases: [
      at("5m", "EtcdOperatorScrapeSourceDown"),
      at(
        "15m",
        "EtcdOperatorScrapeSourceDown",
        fired("EtcdOperatorScrapeSourceDown", { source: "restores" }),
      ),
    ],
  },
  {
    alert: "EtcdOperatorQueueBacklog",
    input: [
      ...fromReplicas(
        "etcd_operator_queue_oldest_new_job_wait_seconds",
        'queue="etcd-reconcile"',
        "0 0 90x10",
      ),
      // A backup waiting for a slot behind long backups is not a backlog of reconciles.
      ...fromReplicas("etcd_operator_queue_oldest_new_job_wait_seconds", 'queue="etcd-backup"', "900x12"),
    ],
    cases: [
      at("4m", "EtcdOperatorQueueBacklog"),
      at(
        "10m",
        "EtcdOperatorQueueBacklog",
        fired("EtcdOperatorQueueBacklog", { queue: "etcd-reconcile" }, "1m 30s"),
      ),
    ],
  },
  {
    alert: "EtcdOperatorRedisDown",
    input: [
      // A worker whose connections are lost for 10 minutes, and one whose worker connection blips.
      {
        series: 'etcd_operator_redis_connected{connection="commands",pod="eop-worker-a"}',
        values: "1 1 0x12",
      },
      { series: 'etcd_operator_redis_connected{connection="worker",pod="eop-worker-a"}', values: "1 1 0x12" },
      { series: 'etcd_operator_redis_connected{connection="commands",pod="eop-worker-b"}', values: "1x14" },
      { series: 'etcd_operator_redis_connected{connection="worker",pod="eop-worker-b"}', values: "1 0 1x12" },
    ],
    cases: [
      at("3m", "EtcdOperatorRedisDown"),
      at("10m", "EtcdOperatorRedisDown", fired("EtcdOperatorRedisDown", { pod: "eop-worker-a" })),
    ],
  },
  {
    alert: "EtcdOperatorReconcileErrors",
    input: [
      { series: 'etcd_operator_reconcile_total{result="error",pod="eop-worker-a"}', values: "0+1x60" },
      { series: 'etcd_operator_reconcile_total{result="step",pod="eop-worker-b"}', values: "0+10x60" },
    ],
    cases: [
      at("20m", "EtcdOperatorReconcileErrors"),
      at("45m", "EtcdOperatorReconcileErrors", fired("EtcdOperatorReconcileErrors", {})),
    ],
  },
  {
    alert: "EtcdClusterSpecRefused",
    input: [
      { series: 'etcd_operator_reconcile_total{result="invalid",pod="eop-worker-a"}', values: "0+1x30" },
      { series: 'etcd_operator_reconcile_total{result="step",pod="eop-worker-a"}', values: "0+10x30" },
    ],
    cases: [
      at("5m", "EtcdClusterSpecRefused"),
      at("20m", "EtcdClusterSpecRefused", fired("EtcdClusterSpecRefused", {})),
    ],
  },
];

/** promtool's unit-test file for these tests, against the rule file beside it. */
function unitTestFile(tests: UnitTest[]): string {
  return stringify({
    rule_files: ["rules.yaml"],
    evaluation_interval: "1m",
    tests: tests.map((u) => ({
      name: u.alert,
      interval: "1m",
      input_series: u.input,
      alert_rule_test: u.cases,
    })),
  });
}

function promtoolTest(tests: UnitTest[]) {
  writeFileSync(join(work, "tests.yaml"), unitTestFile(tests));
  return run(promtool, ["test", "rules", "tests.yaml"]);
}

t.test("every alert has a unit test that fires it and one that does not", async (t) => {
  t.same(
    UNIT_TESTS.map((u) => u.alert).sort(),
    RULES.map((r) => r.alert).sort(),
    "one group of series per alert",
  );
  for (const u of UNIT_TESTS) {
    t.ok(
      u.cases.every((c) => c.alertname === u.alert),
      `${u.alert}: its cases are its own`,
    );
    t.ok(
      u.cases.some((c) => c.exp_alerts.length > 0),
      `${u.alert}: a case where it fires`,
    );
    t.ok(
      u.cases.some((c) => c.exp_alerts.length === 0),
      `${u.alert}: a case where it does not`,
    );
  }
});

t.test("promtool test rules: each alert fires where it should and nowhere else", async (t) => {
  const result = promtoolTest(UNIT_TESTS);
  t.equal(result.status, 0, result.output);
  t.match(result.output, "SUCCESS");
});

t.test("the unit tests can fail: a wrong expectation is caught", async (t) => {
  const [first, ...rest] = UNIT_TESTS;
  if (!first) throw new Error("no unit tests");
  const silent = { ...first, cases: first.cases.map((c) => ({ ...c, exp_alerts: [] })) };
  const quiet = promtoolTest([silent, ...rest]);
  t.not(quiet.status, 0, "an alert that fires where none was expected fails the run");
  t.match(quiet.output, first.alert);
  const reworded = {
    ...first,
    cases: first.cases.map((c) => ({
      ...c,
      exp_alerts: c.exp_alerts.map((a) => ({
        ...a,
        exp_annotations: { ...a.exp_annotations, summary: `${a.exp_annotations.summary}!` },
      })),
    })),
  };
  const wrong = promtoolTest([reworded, ...rest]);
  t.not(wrong.status, 0, "so does an annotation other than the one expected");
  t.match(wrong.output, first.alert);
});

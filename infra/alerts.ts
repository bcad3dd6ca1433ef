// The Prometheus alerts shipped with the operator, written once here as data and generated into the
// two installs as a Prometheus Operator PrometheusRule: the Helm chart's template (behind
// `prometheusRule.enabled`) and the kustomize component manifests/components/alerts.
//   node infra/alerts.ts          write the chart template and the component's files
//   node infra/alerts.ts --check  exit 1 when one of them differs from what would be generated
// Each alert's runbook is its section of docs/operations.md (annotation `runbook`: the project has no
// public URL to link to). tests/alerts.test.ts runs the check, `promtool check rules` and a promtool
// unit test of every alert.
//
// The operator's gauges of the world (members, backups, restores) are served by each HTTP replica, so
// the alerts aggregate them by object (`max by (namespace, cluster)`) and do not depend on the
// scrape's own labels (pod, instance, job).
import { join } from "node:path";
import { stringify } from "yaml";
import { formatted, generatorMain, ROOT } from "./docs/page.ts";

export const RUNBOOK_PAGE = "docs/operations.md";
export const CHART_TEMPLATE = join(ROOT, "charts", "etcd-operator", "templates", "prometheusrule.yaml");
export const COMPONENT_DIR = join(ROOT, "manifests", "components", "alerts");
const COMMAND = "node infra/alerts.ts";

export type Severity = "critical" | "warning";

export interface AlertRule {
  alert: string;
  expr: string;
  /** How long the expression must hold before the alert fires; absent: at once. */
  for?: string;
  labels: { severity: Severity };
  annotations: { summary: string; description: string; runbook: string };
}

export interface RuleGroup {
  name: string;
  rules: AlertRule[];
}

interface AlertSpec {
  alert: string;
  expr: string;
  for?: string;
  severity: Severity;
  summary: string;
  description: string;
}

/** The rule, with its runbook: the section of docs/operations.md headed by the alert's name. */
function rule(spec: AlertSpec): AlertRule {
  const { alert, expr, severity, summary, description } = spec;
  return {
    alert,
    expr,
    ...(spec.for === undefined ? {} : { for: spec.for }),
    labels: { severity },
    annotations: { summary, description, runbook: `${RUNBOOK_PAGE}#${alert.toLowerCase()}` },
  };
}

/** `max by (labels) (metric)`: one series per object, whichever HTTP replica served it. */
function perObject(aggregation: "max" | "min", labels: string, metric: string): string {
  return `${aggregation} by (${labels}) (${metric})`;
}
const perCluster = (metric: string) => perObject("max", "namespace, cluster", metric);
const perBackup = (aggregation: "max" | "min", metric: string) =>
  perObject(aggregation, "namespace, backup", metric);

const CLUSTER = "{{ $labels.namespace }}/{{ $labels.cluster }}";
const BACKUP = "{{ $labels.namespace }}/{{ $labels.backup }}";
const READY = perCluster("etcd_operator_cluster_ready_members");

export const ALERT_GROUPS: RuleGroup[] = [
  {
    name: "etcd-operator.clusters",
    rules: [
      rule({
        alert: "EtcdClusterUnavailable",
        expr: `${perCluster("etcd_operator_cluster_available")} == 0`,
        for: "2m",
        severity: "critical",
        summary: `etcd cluster ${CLUSTER} is not Available`,
        description:
          "No majority of its voting members is healthy: the cluster refuses writes and linearizable reads.",
      }),
      rule({
        alert: "EtcdClusterQuorumAtRisk",
        expr: [
          "(",
          `  ${READY} < ${perCluster("etcd_operator_cluster_members")}`,
          "  or",
          `  ${READY} < ${perCluster("etcd_operator_cluster_desired_members")}`,
          ")",
          `and on (namespace, cluster) ${perCluster("etcd_operator_cluster_available")} == 1`,
        ].join("\n"),
        for: "5m",
        severity: "warning",
        summary: `etcd cluster ${CLUSTER} runs with a member down`,
        description:
          "Only {{ $value }} members are ready, fewer than its voting members or spec.size: the cluster " +
          "is Available but tolerates one failure fewer than it should.",
      }),
      rule({
        alert: "EtcdClusterMembersUnhealthy",
        expr: `${READY} < ${perCluster("etcd_operator_cluster_desired_members")}`,
        for: "15m",
        severity: "warning",
        summary: `etcd cluster ${CLUSTER} has had fewer ready members than spec.size for 15 minutes`,
        description:
          "Only {{ $value }} members are ready: longer than the operator takes to replace a member.",
      }),
      rule({
        alert: "EtcdClusterNoSpace",
        expr: `${perCluster("etcd_operator_cluster_no_space")} == 1`,
        for: "5m",
        severity: "critical",
        summary: `etcd cluster ${CLUSTER} refuses writes: NOSPACE`,
        description:
          "A member raised NOSPACE (its database reached its space quota) and the operator has not " +
          "disarmed it within 5 minutes; the cluster accepts only reads and deletes.",
      }),
      rule({
        alert: "EtcdDatabaseNearQuota",
        expr: "etcd_mvcc_db_total_size_in_bytes / etcd_server_quota_backend_bytes > 0.8",
        for: "10m",
        severity: "warning",
        summary:
          "etcd member {{ $labels.instance }} uses {{ $value | humanizePercentage }} of its space quota",
        description:
          "Its database file is past 80% of its quota (--quota-backend-bytes); at 100% etcd raises " +
          "NOSPACE and refuses writes.",
      }),
    ],
  },
  {
    name: "etcd-operator.backups",
    rules: [
      rule({
        alert: "EtcdBackupTooOld",
        expr: `${perBackup("min", "etcd_operator_backup_age_seconds")}\n  > 2 * ${perBackup("max", "etcd_operator_backup_interval_seconds")}`,
        severity: "warning",
        summary: `Backup ${BACKUP} is older than two of its intervals`,
        description: "The last successful backup was taken {{ $value | humanizeDuration }} ago.",
      }),
      rule({
        alert: "EtcdBackupFailed",
        expr: `${perBackup("max", "etcd_operator_backup_succeeded")} == 0`,
        for: "15m",
        severity: "warning",
        summary: `Backup ${BACKUP} failed`,
        description:
          "Its last attempt failed (status.succeeded false); its Succeeded condition and Events say why.",
      }),
      rule({
        alert: "EtcdBackupVerificationFailed",
        expr: `${perBackup("max", "etcd_operator_backup_verification_succeeded")} == 0`,
        severity: "warning",
        summary: `Backup ${BACKUP} failed its verification`,
        description:
          "Restored into a throwaway etcd, the last backup did not start or did not hold what it " +
          "recorded (status.verification.message says which): do not count on it for a restore.",
      }),
      rule({
        alert: "EtcdRestoreFailed",
        expr: `${perObject("max", "namespace, restore", "etcd_operator_restore_succeeded")} == 0`,
        severity: "warning",
        summary: "Restore {{ $labels.namespace }}/{{ $labels.restore }} failed",
        description:
          "The EtcdRestore ended in phase Failed; its status.reason says why and what was changed.",
      }),
    ],
  },
  {
    name: "etcd-operator.operator",
    rules: [
      rule({
        alert: "EtcdOperatorAbsent",
        expr: 'absent(etcd_operator_scrape_source_up{source="clusters"})',
        for: "10m",
        severity: "warning",
        summary: "No etcd operator HTTP server is scraped",
        description:
          "Prometheus has no gauges of the operator's clusters and backups: every other alert of " +
          "the etcd-operator groups is silent meanwhile.",
      }),
      rule({
        alert: "EtcdOperatorScrapeSourceDown",
        expr: "min by (source) (etcd_operator_scrape_source_up) == 0",
        for: "10m",
        severity: "warning",
        summary: "The etcd operator cannot read {{ $labels.source }}",
        description:
          "Its HTTP server could not read {{ $labels.source }} for its gauges for 10 minutes: their " +
          "series are missing, and the alerts on them silent.",
      }),
      rule({
        alert: "EtcdOperatorQueueBacklog",
        expr: 'max by (queue) (etcd_operator_queue_oldest_new_job_wait_seconds{queue="etcd-reconcile"}) > 60',
        for: "5m",
        severity: "warning",
        summary: "Reconcile requests wait for a worker",
        description:
          "The oldest new job of {{ $labels.queue }} has waited {{ $value | humanizeDuration }} for a " +
          "worker: workers down or too few, or Redis in trouble.",
      }),
      rule({
        alert: "EtcdOperatorRedisDown",
        expr: "min by (pod) (etcd_operator_redis_connected) == 0",
        for: "2m",
        severity: "critical",
        summary: "The etcd operator cannot reach Redis",
        description:
          "{{ $labels.pod }} has had no Redis connection for 2 minutes: no EtcdCluster is healed, scaled " +
          "or backed up until Redis is back.",
      }),
      rule({
        alert: "EtcdOperatorReconcileErrors",
        expr: 'sum(rate(etcd_operator_reconcile_total{result="error"}[10m])) > 0',
        for: "30m",
        severity: "warning",
        summary: "The etcd operator's reconciles keep failing",
        description:
          "Reconciles have ended in errors for 30 minutes; the clusters' StepFailed Events say why.",
      }),
      rule({
        alert: "EtcdClusterSpecRefused",
        expr: 'sum(rate(etcd_operator_reconcile_total{result="invalid"}[10m])) > 0',
        for: "10m",
        severity: "warning",
        summary: "The etcd operator refuses a cluster's spec",
        description:
          "An EtcdCluster's spec cannot work and nothing is done for it until it is fixed (condition " +
          "Degraded, reason InvalidSpec).",
      }),
    ],
  },
];

// ---------------------------------------------------------------------------------------------------------
// Files

const HEADER = `# Generated by infra/alerts.ts. Do not edit: run \`${COMMAND}\`.`;
const OBJECT = { apiVersion: "monitoring.coreos.com/v1", kind: "PrometheusRule" };

/** The rule groups as YAML, as a PrometheusRule's spec holds them (and a Prometheus rule file). */
export function rulesYaml(): string {
  return stringify({ groups: ALERT_GROUPS }, { lineWidth: 0 });
}

/** The component's PrometheusRule; the overlay gives it its namespace. */
export function componentRule(): string {
  const object = {
    ...OBJECT,
    metadata: { name: "etcd-operator", labels: { "app.kubernetes.io/name": "etcd-operator" } },
    spec: { groups: ALERT_GROUPS },
  };
  const path = join(COMPONENT_DIR, "prometheusrule.yaml");
  return formatted(`${HEADER}\n${stringify(object, { lineWidth: 0 })}`, path);
}

export function componentKustomization(): string {
  const path = join(COMPONENT_DIR, "kustomization.yaml");
  return formatted(
    `${HEADER}
# The alerts of docs/operations.md ("What to alert on") as a Prometheus Operator PrometheusRule
# (its CRD installed separately). Add to your overlay:
#   components:
#     - ../../components/alerts
# and, when your Prometheus selects rules by label (its ruleSelector), that label with a patch.
apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
resources:
  - prometheusrule.yaml
`,
    path,
  );
}

/**
 * The chart's template: the same rules, their own `{{ ... }}` (Prometheus's templates in the
 * annotations) written so that Helm prints them instead of running them.
 */
export function chartTemplate(): string {
  const spec = stringify({ spec: { groups: ALERT_GROUPS } }, { lineWidth: 0 }).replaceAll("{{", '{{ "{{" }}');
  return `{{- /* ${HEADER.slice(2)}
Alerts for the operator's clusters, backups and itself; runbooks in docs/operations.md. */}}
{{- if .Values.prometheusRule.enabled }}
apiVersion: ${OBJECT.apiVersion}
kind: ${OBJECT.kind}
metadata:
  name: {{ include "etcd-operator.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "etcd-operator.labels" . | nindent 4 }}
    {{- with .Values.prometheusRule.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
${spec.trimEnd()}
{{- end }}
`;
}

export function alertFiles(): Record<string, () => string> {
  return {
    [CHART_TEMPLATE]: chartTemplate,
    [join(COMPONENT_DIR, "kustomization.yaml")]: componentKustomization,
    [join(COMPONENT_DIR, "prometheusrule.yaml")]: componentRule,
  };
}

if (import.meta.main) generatorMain(COMMAND, alertFiles());

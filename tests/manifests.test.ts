// The install paths against the real local control plane (kube-apiserver with RBAC, controller
// manager, process kubelet, Redis): the CRDs install with kubectl and `kubectl explain` describes
// every field; every manifest, both kustomize overlays (with and without the KEDA, metrics and chaos
// components) and the Helm chart (linted, rendered for several values) pass a server-side dry run;
// chaos mode is set on the scheduler alone, and only with the chaos component or values;
// the RBAC of each overlay, applied for real, is enough for the operator to run a cluster as that
// ServiceAccount and no more than intended; KEDA's list key is the one BullMQ fills. The Dockerfile
// and docker-compose.yml are checked by parsing (no Docker here). (The alerts' rules themselves:
// tests/alerts.test.ts.)
//
// Only dry runs for the operator's Deployments: their image cannot be built or pulled here (no
// Docker, no registry), so they could never start. KEDA and the Prometheus Operator are not
// installed either: this test installs small stand-in CRDs for ScaledObject, ServiceMonitor and
// PrometheusRule (their group, version, kind and the fields we set, typed) so the server can dry-run
// those objects.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import type {
  V1ClusterRole,
  V1Container,
  V1Deployment,
  V1PolicyRule,
  V1Role,
  V1Service,
  V1ValidatingWebhookConfiguration,
} from "@kubernetes/client-node";
import { KubeConfig } from "@kubernetes/client-node";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import t, { type Test } from "tap";
import { parse, stringify } from "yaml";
import { ensureAssets } from "../infra/local/assets.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { ensureHelm } from "../infra/local/helm.ts";
import { waitFor } from "../infra/local/kube-wait.ts";
import { OPERATOR_ENV, OPERATOR_NODE_FLAGS } from "../infra/operator.ts";
import { type EtcdCluster, SCOPE_ANNOTATION, SCOPE_CLUSTERWIDE } from "../shared/api/etcd-cluster.ts";
import { loadConfig } from "../shared/config.ts";
import { Kube } from "../shared/kube.ts";
import { RECONCILE_QUEUE, requestReconcile } from "../shared/queue.ts";
import { OPERATOR_IMAGE_NODE } from "../shared/restore-pods.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { acceptedRoles } from "./helpers/operator-roles.ts";
import {
  copySources,
  dockerfileInstructions,
  dockerignoreMatcher,
  execForm,
  importGraph,
  type KubeObject,
  ofKind,
  ROOT,
  yamlObjects,
} from "./helpers/packaging.ts";

const NAMESPACE = "etcd-operator";
const OPERATOR_SA = `system:serviceaccount:${NAMESPACE}:etcd-operator`;

const assets = await ensureAssets({ log: (line) => t.comment(line) });
const helm = await ensureHelm({ log: (line) => t.comment(line) });
const cluster = await startLocalCluster({ name: "pkg" });
t.teardown(() => cluster.stop());
const kc = new KubeConfig();
kc.loadFromFile(cluster.kubeconfigPath);
const kube = new Kube(kc);

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], input?: string): Run {
  const result = spawnSync(command, args, { encoding: "utf8", input, cwd: ROOT, maxBuffer: 64 << 20 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

function kubectl(args: string[], input?: string): string {
  const result = run(assets.kubectl, ["--kubeconfig", cluster.kubeconfigPath, ...args], input);
  if (result.status !== 0) throw new Error(`kubectl ${args.join(" ")} failed:\n${result.stderr}`);
  return result.stdout;
}

function helmTemplate(args: string[]): string {
  const result = run(helm, ["template", "eop", "charts/etcd-operator", "--namespace", NAMESPACE, ...args]);
  if (result.status !== 0) throw new Error(`helm template ${args.join(" ")} failed:\n${result.stderr}`);
  return result.stdout;
}

/** Server-side dry run of a YAML stream; returns kubectl's one line per object. */
function dryRun(yaml: string, namespace = NAMESPACE): string[] {
  return kubectl(["apply", "--dry-run=server", "-n", namespace, "-f", "-"], yaml).trim().split("\n");
}

function yamlFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true })
    .map(String)
    .filter((f) => f.endsWith(".yaml") && !f.endsWith("kustomization.yaml"))
    .map((f) => join(dir, f))
    .sort();
}

/** An overlay plus components, rendered from a kustomization in a temporary folder. */
function kustomizeWith(overlay: string, components: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), "kustomize-"));
  try {
    const rel = (p: string) => relative(dir, join(ROOT, p));
    writeFileSync(
      join(dir, "kustomization.yaml"),
      stringify({
        apiVersion: "kustomize.config.k8s.io/v1beta1",
        kind: "Kustomization",
        resources: [rel(overlay)],
        components: components.map(rel),
      }),
    );
    return kubectl(["kustomize", dir]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const allRoles = await acceptedRoles(["all", "watcher", "worker", "scheduler", "http"]);

/** The role must be one the operator's CLI accepts. */
function checkRole(tt: Test, role: string | undefined, where: string): void {
  if (role !== undefined && allRoles.has(role)) {
    tt.pass(`${where}: --role ${role} is a role of the operator`);
  } else {
    tt.fail(`${where}: --role ${role} is not a role of the operator (have ${[...allRoles].join(", ")})`);
  }
}

function roleArg(args: string[] | undefined): string | undefined {
  const i = args?.indexOf("--role") ?? -1;
  return i >= 0 ? args?.[i + 1] : undefined;
}

// ---------------------------------------------------------------------------------------------------------
// CRDs

await t.test("the CRDs install with kubectl apply --server-side and become Established", async (t) => {
  const out = kubectl(["apply", "--server-side", "-f", "manifests/crds/"]);
  t.match(out, /etcdclusters\.etcd\.database\.coreos\.com serverside-applied/);
  t.match(out, /etcdbackups\.etcd\.database\.coreos\.com serverside-applied/);
  t.match(out, /etcdrestores\.etcd\.database\.coreos\.com serverside-applied/);
  kubectl(["wait", "--for=condition=Established", "--timeout=60s", "-f", "manifests/crds/"]);
});

interface OpenApiSchema {
  description?: string;
  properties?: Record<string, OpenApiSchema>;
  items?: OpenApiSchema;
  additionalProperties?: OpenApiSchema | boolean;
  allOf?: OpenApiSchema[];
}

/** Field paths under `schema` (a.b, a[].c) and whether each has a description. */
function fields(schema: OpenApiSchema, at: string): { path: string; described: boolean }[] {
  const out: { path: string; described: boolean }[] = [];
  for (const [name, sub] of Object.entries(schema.properties ?? {})) {
    const path = at ? `${at}.${name}` : name;
    // A $ref'd type (metadata → ObjectMeta) comes as allOf with the description beside it.
    out.push({ path, described: (sub.description ?? "").trim() !== "" });
    out.push(...fields(sub, path));
    if (sub.items) out.push(...fields(sub.items, path));
    if (typeof sub.additionalProperties === "object") out.push(...fields(sub.additionalProperties, path));
  }
  return out;
}

await t.test("kubectl explain describes every field of the three kinds", async (t) => {
  // What kubectl explain reads: the OpenAPI v3 document the API server publishes for the group.
  const doc = await waitFor("the OpenAPI v3 document of etcd.database.coreos.com/v1beta2", async () => {
    const result = run(assets.kubectl, [
      "--kubeconfig",
      cluster.kubeconfigPath,
      "get",
      "--raw",
      "/openapi/v3/apis/etcd.database.coreos.com/v1beta2",
    ]);
    if (result.status !== 0) return undefined;
    const parsed = JSON.parse(result.stdout) as { components: { schemas: Record<string, OpenApiSchema> } };
    return Object.keys(parsed.components.schemas).some((k) => k.endsWith(".EtcdRestore"))
      ? parsed
      : undefined;
  });
  for (const kind of ["EtcdCluster", "EtcdBackup", "EtcdRestore"]) {
    const key = Object.keys(doc.components.schemas).find((k) => k.endsWith(`.v1beta2.${kind}`));
    const schema = key === undefined ? undefined : doc.components.schemas[key];
    if (!schema) {
      t.fail(`${kind} is not in the published OpenAPI`);
      continue;
    }
    const all = fields(schema, "");
    const spec = all.filter((f) => f.path.startsWith("spec"));
    t.ok(spec.length >= 5, `${kind}: ${spec.length} spec fields found`);
    t.same(
      all.filter((f) => !f.described).map((f) => f.path),
      [],
      `${kind}: every field (${all.length}) has a description`,
    );
    // And kubectl explain itself prints them: each direct field of spec with its description.
    // Right after the CRDs are Established kubectl may not find the resource yet: wait for it.
    const explained = await waitFor(`kubectl explain ${kind.toLowerCase()}.spec`, async () => {
      const result = run(assets.kubectl, [
        "--kubeconfig",
        cluster.kubeconfigPath,
        "explain",
        `${kind.toLowerCase()}.spec`,
      ]);
      return result.status === 0 ? result.stdout : undefined;
    });
    t.notMatch(explained, /<empty>/, `kubectl explain ${kind.toLowerCase()}.spec has no <empty> description`);
    const direct = spec.filter((f) => /^spec\.[^.]+$/.test(f.path)).map((f) => f.path.slice("spec.".length));
    for (const name of direct) {
      t.match(
        explained,
        new RegExp(`^\\s{2}${name}\\t<[^>]+>( -required-)?\\n(\\s{2}enum: [^\\n]*\\n)?\\s{4}\\S`, "m"),
        `${kind}.spec.${name}`,
      );
    }
    // Nested fields, one explain each: no field anywhere in spec prints an empty description.
    const nested = spec.filter((f) => f.path.split(".").length > 2).map((f) => f.path);
    const empty = nested.filter((path) =>
      /DESCRIPTION:\s*\n\s*<empty>/.test(kubectl(["explain", `${kind.toLowerCase()}.${path}`])),
    );
    t.same(empty, [], `${kind}: kubectl explain of ${nested.length} nested spec fields`);
  }
});

// ---------------------------------------------------------------------------------------------------------
// Stand-ins for CRDs of other projects, so objects of their kinds can be dry-run.

function standInCrd(group: string, version: string, kind: string, plural: string, spec: object): object {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${plural}.${group}` },
    spec: {
      group,
      names: { kind, plural, listKind: `${kind}List`, singular: kind.toLowerCase() },
      scope: "Namespaced",
      versions: [
        {
          name: version,
          served: true,
          storage: true,
          schema: { openAPIV3Schema: { type: "object", required: ["spec"], properties: { spec } } },
        },
      ],
    },
  };
}

const stringMap = { type: "object", additionalProperties: { type: "string" } };
const KEDA_SCALED_OBJECT = standInCrd("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects", {
  type: "object",
  required: ["scaleTargetRef", "triggers"],
  properties: {
    scaleTargetRef: { type: "object", required: ["name"], properties: { name: { type: "string" } } },
    minReplicaCount: { type: "integer", minimum: 0 },
    maxReplicaCount: { type: "integer", minimum: 1 },
    pollingInterval: { type: "integer" },
    cooldownPeriod: { type: "integer" },
    triggers: {
      type: "array",
      minItems: 1,
      items: {
        type: "object",
        required: ["type", "metadata"],
        properties: {
          type: { type: "string" },
          // KEDA's trigger metadata is a map of strings: a number here would be refused.
          metadata: stringMap,
          authenticationRef: { type: "object", properties: { name: { type: "string" } } },
        },
      },
    },
  },
});
const SERVICE_MONITOR = standInCrd("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors", {
  type: "object",
  required: ["selector", "endpoints"],
  properties: {
    selector: { type: "object", "x-kubernetes-preserve-unknown-fields": true },
    endpoints: {
      type: "array",
      items: {
        type: "object",
        properties: {
          port: { type: "string" },
          path: { type: "string" },
          interval: { type: "string" },
          scheme: { type: "string", enum: ["http", "https"] },
          bearerTokenFile: { type: "string" },
          tlsConfig: { type: "object", properties: { insecureSkipVerify: { type: "boolean" } } },
        },
      },
    },
  },
});

const PROMETHEUS_RULE = standInCrd("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules", {
  type: "object",
  properties: {
    groups: {
      type: "array",
      items: {
        type: "object",
        required: ["name", "rules"],
        properties: {
          name: { type: "string" },
          rules: {
            type: "array",
            items: {
              type: "object",
              required: ["expr"],
              properties: {
                alert: { type: "string" },
                expr: { type: "string" },
                for: { type: "string" },
                labels: stringMap,
                annotations: stringMap,
              },
            },
          },
        },
      },
    },
  },
});

await t.test(
  "stand-in CRDs for KEDA's ScaledObject, the ServiceMonitor and the PrometheusRule install",
  async (t) => {
    const out = kubectl(
      ["apply", "-f", "-"],
      [KEDA_SCALED_OBJECT, SERVICE_MONITOR, PROMETHEUS_RULE].map((o) => JSON.stringify(o)).join("\n"),
    );
    t.match(out, /scaledobjects\.keda\.sh created/);
    kubectl([
      "wait",
      "--for=condition=Established",
      "--timeout=60s",
      "crd/scaledobjects.keda.sh",
      "crd/servicemonitors.monitoring.coreos.com",
      "crd/prometheusrules.monitoring.coreos.com",
    ]);
    // The namespace objects go into; a dry run cannot create it for the objects that follow.
    kubectl(["create", "namespace", NAMESPACE]);
  },
);

// ---------------------------------------------------------------------------------------------------------
// Plain manifests and kustomize

await t.test("every manifest file passes a server-side dry run", async (t) => {
  const files = [
    ...yamlFiles("manifests/base"),
    ...yamlFiles("manifests/overlays"),
    ...yamlFiles("manifests/components"),
    ...yamlFiles("manifests/examples"),
  ];
  t.ok(files.length >= 15, `${files.length} files`);
  for (const file of files) {
    const text = readFileSync(join(ROOT, file), "utf8");
    // Strategic-merge patch files of an overlay are not objects of their own.
    if (file.endsWith("cluster-wide-env.yaml")) continue;
    const objects = yamlObjects(text);
    const lines = dryRun(text);
    t.equal(lines.length, objects.length, `${file}: ${lines.join("; ")}`);
    t.ok(
      lines.every((l) => /\(server dry run\)$/.test(l)),
      `${file}: every object accepted by the server`,
    );
  }
});

interface Rendered {
  name: string;
  objects: KubeObject[];
  yaml: string;
  clusterWide: boolean;
}

const overlays: Rendered[] = [
  { name: "namespaced", clusterWide: false },
  { name: "cluster-wide", clusterWide: true },
].map(({ name, clusterWide }) => {
  const yaml = kubectl(["kustomize", join(ROOT, "manifests/overlays", name)]);
  return { name: `overlay ${name}`, yaml, objects: yamlObjects(yaml), clusterWide };
});

function operatorContainers(objects: KubeObject[]): { deployment: string; container: V1Container }[] {
  return ofKind<V1Deployment>(objects, "Deployment")
    .filter((d) => d.metadata.labels?.["app.kubernetes.io/component"] !== "redis")
    .flatMap((d) =>
      (d.spec?.template.spec?.containers ?? []).map((container) => ({
        deployment: d.metadata.name,
        container,
      })),
    );
}

function envOf(container: V1Container, name: string): string | undefined {
  return container.env?.find((e) => e.name === name)?.value;
}

/** Chaos mode's settings as a rendering sets them (environment values). */
interface ChaosEnv {
  level: string;
  intervalMs: string;
}

/**
 * Chaos mode runs in the scheduler role: with `chaos`, the scheduler container (and no other) sets
 * CHAOS_LEVEL and CHAOS_INTERVAL_MS to those values, which the operator's own configuration reads
 * as that level and interval; without, no container sets either (off: the default level 0).
 */
function checkChaos(t: Test, operator: { deployment: string; container: V1Container }[], chaos?: ChaosEnv) {
  for (const { deployment, container } of operator) {
    const where = `${deployment}/${container.name}`;
    const set = (container.env ?? []).filter((e) => e.name.startsWith("CHAOS_")).map((e) => e.name);
    if (!chaos || roleArg(container.args) !== "scheduler") {
      t.same(set, [], `${where}: no chaos setting`);
      continue;
    }
    t.equal(envOf(container, "CHAOS_LEVEL"), chaos.level, `${where}: CHAOS_LEVEL=${chaos.level}`);
    t.equal(
      envOf(container, "CHAOS_INTERVAL_MS"),
      chaos.intervalMs,
      `${where}: CHAOS_INTERVAL_MS=${chaos.intervalMs}`,
    );
    const config = loadConfig({
      CHAOS_LEVEL: envOf(container, "CHAOS_LEVEL"),
      CHAOS_INTERVAL_MS: envOf(container, "CHAOS_INTERVAL_MS"),
    });
    t.same(
      [config.chaosLevel, config.chaosIntervalMs],
      [Number(chaos.level), Number(chaos.intervalMs)],
      `${where}: the operator reads them as chaos level ${chaos.level} every ${chaos.intervalMs} ms`,
    );
  }
}

/** Checks every rendering (overlay or chart) shares: security, resources, probes, wiring, scope. */
async function checkRendering(
  t: Test,
  rendered: Rendered,
  options: { keda?: boolean; redisUrl?: string; chaos?: ChaosEnv } = {},
) {
  const { objects, clusterWide } = rendered;
  const deployments = ofKind<V1Deployment>(objects, "Deployment");
  const services = ofKind<V1Service>(objects, "Service");
  const operator = operatorContainers(objects);
  t.same(
    operator.map((o) => roleArg(o.container.args)).sort(),
    ["http", "scheduler", "watcher", "worker"],
    "one container per role: watcher, scheduler, worker, http",
  );
  for (const d of deployments) {
    const pod = d.spec?.template.spec;
    t.equal(pod?.securityContext?.runAsNonRoot, true, `${d.metadata.name}: runAsNonRoot`);
    t.ok((pod?.securityContext?.runAsUser ?? 0) > 0, `${d.metadata.name}: a non-root uid`);
    t.equal(
      pod?.securityContext?.seccompProfile?.type,
      "RuntimeDefault",
      `${d.metadata.name}: seccomp RuntimeDefault`,
    );
    for (const c of pod?.containers ?? []) {
      const where = `${d.metadata.name}/${c.name}`;
      t.equal(c.securityContext?.readOnlyRootFilesystem, true, `${where}: read-only root filesystem`);
      t.equal(c.securityContext?.allowPrivilegeEscalation, false, `${where}: no privilege escalation`);
      t.same(c.securityContext?.capabilities?.drop, ["ALL"], `${where}: drops ALL capabilities`);
      t.ok(c.resources?.requests?.memory && c.resources.limits?.memory, `${where}: memory request and limit`);
      t.ok(c.livenessProbe && c.readinessProbe, `${where}: liveness and readiness probes`);
    }
  }
  for (const { deployment, container } of operator) {
    const where = `${deployment}/${container.name}`;
    checkRole(t, roleArg(container.args), where);
    t.match(container.image, /etcd-operator:0\.1\.0$/, `${where}: the operator image`);
    t.equal(envOf(container, "CLUSTER_WIDE"), String(clusterWide), `${where}: CLUSTER_WIDE=${clusterWide}`);
    t.equal(
      container.env?.find((e) => e.name === "MY_POD_NAMESPACE")?.valueFrom?.fieldRef?.fieldPath,
      "metadata.namespace",
      `${where}: MY_POD_NAMESPACE from the pod`,
    );
    const redisUrl = envOf(container, "REDIS_URL") ?? "";
    if (options.redisUrl) {
      t.equal(redisUrl, options.redisUrl, `${where}: the given Redis`);
    } else {
      const host = new URL(redisUrl).hostname;
      t.ok(
        services.some((s) => s.metadata.name === host && s.spec?.ports?.some((p) => p.port === 6379)),
        `${where}: REDIS_URL names the bundled Redis Service ${host}`,
      );
    }
    const probe = container.livenessProbe?.httpGet;
    t.equal(probe?.path, "/livez", `${where}: liveness on /livez`);
    t.equal(container.readinessProbe?.httpGet?.path, "/readyz", `${where}: readiness on /readyz`);
  }
  checkChaos(t, operator, options.chaos);
  if (!options.redisUrl) {
    const redis = deployments.find((d) => d.metadata.labels?.["app.kubernetes.io/component"] === "redis");
    const args = redis?.spec?.template.spec?.containers[0]?.args ?? [];
    t.equal(args[args.indexOf("--hz") + 1], "1", "the bundled Redis runs its timer at 1 Hz (cheap at rest)");
  }
  // RBAC: the scope decides Role or ClusterRole, with the same rules either way.
  const roles = ofKind<V1Role>(objects, "Role");
  const clusterRoles = ofKind<V1ClusterRole>(objects, "ClusterRole");
  const main = clusterWide
    ? clusterRoles.find((r) => !/-(cluster-scoped|metrics-reader)$/.test(r.metadata.name))
    : roles[0];
  t.ok(main, `${clusterWide ? "a ClusterRole" : "a Role"} for the operator`);
  t.equal(
    roles.length,
    clusterWide ? 0 : 1,
    clusterWide ? "no Role when cluster-wide" : "one Role when namespaced",
  );
  t.same(
    normalizeRules(main?.rules),
    normalizeRules(referenceRules),
    "the operator's rules are the reference rules",
  );
  const scoped = clusterRoles.find((r) => r.metadata.name.endsWith("-cluster-scoped"));
  t.same(
    scoped?.rules?.flatMap((r) => r.resources ?? []).sort(),
    ["subjectaccessreviews", "tokenreviews", "validatingwebhookconfigurations"],
    "the cluster-scoped extras: reviews and its own webhook configuration",
  );
  // The webhook points at the HTTP Service and is limited to the namespace when namespaced.
  const [webhook] = ofKind<V1ValidatingWebhookConfiguration>(objects, "ValidatingWebhookConfiguration");
  const http = services.find((s) => s.metadata.labels?.["app.kubernetes.io/component"] === "http");
  t.same(
    webhook?.webhooks?.map((w) => w.rules?.[0]?.resources),
    [["etcdclusters", "etcdclusters/scale"], ["etcdbackups"], ["etcdrestores"]],
    "the three kinds, and kubectl scale of an EtcdCluster",
  );
  t.same(
    webhook?.webhooks?.map((w) => w.clientConfig.service?.path),
    ["/validate/etcdclusters", "/validate/etcdbackups", "/validate/etcdrestores"],
  );
  for (const w of webhook?.webhooks ?? []) {
    const service = w.clientConfig.service;
    t.equal(service?.name, http?.metadata.name, `${w.name}: calls the HTTP Service`);
    t.equal(service?.namespace, http?.metadata.namespace ?? NAMESPACE, `${w.name}: in its namespace`);
    t.ok(
      http?.spec?.ports?.some((p) => p.port === service?.port),
      `${w.name}: on a port the Service has`,
    );
    t.same(w.rules?.[0]?.operations, ["CREATE", "UPDATE"], `${w.name}: never called for deletes`);
    t.same(
      w.matchConditions?.map((c) => c.expression),
      ["!has(object.metadata.deletionTimestamp)"],
      `${w.name}: nor for objects being deleted (finalizers can always be removed)`,
    );
    t.equal(w.failurePolicy, "Fail", `${w.name}: refuses changes while it is down`);
    t.equal(w.sideEffects, "NoneOnDryRun", `${w.name}: dry runs have no side effects`);
    t.same(
      w.namespaceSelector?.matchLabels,
      clusterWide ? undefined : { "kubernetes.io/metadata.name": NAMESPACE },
      `${w.name}: namespace selector`,
    );
  }
  const httpContainer = operator.find((o) => roleArg(o.container.args) === "http")?.container;
  t.equal(
    envOf(httpContainer ?? { name: "" }, "WEBHOOK_CONFIGURATION"),
    webhook?.metadata.name,
    "the HTTP server keeps this webhook's caBundle",
  );
  if (options.keda) {
    const [scaled] = ofKind<{
      spec: {
        scaleTargetRef: { name: string };
        triggers: { type: string; metadata: Record<string, string> }[];
      };
    }>(objects, "ScaledObject");
    const worker = deployments.find((d) => d.metadata.labels?.["app.kubernetes.io/component"] === "worker");
    t.equal(scaled?.spec.scaleTargetRef.name, worker?.metadata.name, "KEDA scales the worker Deployment");
    t.equal(worker?.spec?.replicas, undefined, "the worker Deployment leaves its replica count to KEDA");
    const trigger = scaled?.spec.triggers[0];
    t.equal(trigger?.type, "redis");
    t.equal(trigger?.metadata.listName, `bull:${RECONCILE_QUEUE}:wait`, "the reconcile queue's wait list");
    if (!options.redisUrl) {
      const redis = services.find((s) => s.metadata.labels?.["app.kubernetes.io/component"] === "redis");
      t.equal(
        trigger?.metadata.address,
        `${redis?.metadata.name}.${redis?.metadata.namespace}.svc.cluster.local:6379`,
        "KEDA reaches the bundled Redis by its full name",
      );
    }
  }
}

function normalizeRules(rules: V1PolicyRule[] | undefined): string[] {
  return (rules ?? [])
    .flatMap((r) =>
      (r.resources ?? r.nonResourceURLs ?? []).map(
        (res) =>
          `${(r.apiGroups ?? []).join(",")}/${res}${r.resourceNames ? `[${r.resourceNames.join(",")}]` : ""}: ${[...r.verbs].sort().join(",")}`,
      ),
    )
    .sort();
}

const referenceRules = (
  yamlObjects(readFileSync(join(ROOT, "manifests/overlays/namespaced/role.yaml"), "utf8")).find(
    (o) => o.kind === "Role",
  ) as V1Role & KubeObject
).rules;

for (const overlay of overlays) {
  await t.test(
    `${overlay.name}: renders with kubectl kustomize and passes a server-side dry run`,
    async (t) => {
      await checkRendering(t, overlay);
      t.ok(
        overlay.objects.every(
          (o) =>
            ["Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"].includes(
              o.kind,
            ) || o.metadata.namespace === NAMESPACE,
        ),
        `every namespaced object is in ${NAMESPACE}`,
      );
      const lines = dryRun(overlay.yaml);
      t.equal(lines.length, overlay.objects.length, lines.join("\n"));
    },
  );
}

await t.test(
  "overlays with the KEDA, metrics, alerts and chaos components render and pass a server-side dry run",
  async (t) => {
    for (const overlay of ["namespaced", "cluster-wide"]) {
      const yaml = kustomizeWith(`manifests/overlays/${overlay}`, [
        "manifests/components/keda",
        "manifests/components/metrics",
        "manifests/components/alerts",
        "manifests/components/chaos",
      ]);
      const objects = yamlObjects(yaml);
      await checkRendering(
        t,
        { name: overlay, yaml, objects, clusterWide: overlay === "cluster-wide" },
        { keda: true, chaos: { level: "1", intervalMs: "30000" } },
      );
      t.equal(ofKind(objects, "ServiceMonitor").length, 1, "a ServiceMonitor");
      t.equal(ofKind(objects, "PrometheusRule").length, 1, "a PrometheusRule");
      const lines = dryRun(yaml);
      t.equal(lines.length, objects.length, `${overlay}: ${lines.length} objects accepted`);
    }
  },
);

await t.test("KEDA's list key is the list BullMQ puts a waiting reconcile job in", async (t) => {
  const redis = new Redis(cluster.redisUrl ?? "", { maxRetriesPerRequest: null });
  const queue = new Queue(RECONCILE_QUEUE, { connection: redis });
  t.teardown(async () => {
    await queue.obliterate({ force: true });
    await queue.close();
    redis.disconnect();
  });
  const key = `bull:${RECONCILE_QUEUE}:wait`;
  const before = await redis.llen(key);
  await requestReconcile(queue, redis, "keda-check", "one");
  await requestReconcile(queue, redis, "keda-check", "two");
  t.equal(await redis.llen(key), before + 2, `${key} grows by one per waiting job`);
});

// ---------------------------------------------------------------------------------------------------------
// Helm

await t.test("helm lint passes for the default, cluster-wide and everything-on values", async (t) => {
  for (const values of [
    [],
    ["--set", "scope=cluster-wide"],
    [
      "--set",
      "keda.enabled=true,metrics.serviceMonitor.enabled=true,prometheusRule.enabled=true,redis.bundled=false,redis.url=rediss://redis.example:6380,chaos.level=10",
    ],
  ]) {
    const result = run(helm, ["lint", "--strict", "charts/etcd-operator", ...values]);
    t.equal(result.status, 0, `helm lint ${values.join(" ")}: ${result.stdout}${result.stderr}`);
  }
});

await t.test("the chart refuses bad values with a clear message", async (t) => {
  const noRedis = run(helm, ["template", "eop", "charts/etcd-operator", "--set", "redis.bundled=false"]);
  t.not(noRedis.status, 0);
  t.match(noRedis.stderr, /redis\.url is required when redis\.bundled is false/);
  const badScope = run(helm, ["template", "eop", "charts/etcd-operator", "--set", "scope=everywhere"]);
  t.not(badScope.status, 0);
  t.match(badScope.stderr, /scope/);
  for (const [value, message] of [
    ["chaos.level=11", /chaos\/level.*maximum/],
    ["chaos.level=-1", /chaos\/level.*minimum/],
    ["chaos.intervalMs=10", /chaos\/intervalMs.*minimum/],
  ] as const) {
    const bad = run(helm, ["template", "eop", "charts/etcd-operator", "--set", value]);
    t.not(bad.status, 0, `${value} refused`);
    t.match(bad.stderr, message, `${value}: says which value and why`);
  }
});

const charts: {
  name: string;
  args: string[];
  clusterWide: boolean;
  keda?: boolean;
  redisUrl?: string;
  chaos?: ChaosEnv;
}[] = [
  { name: "default values", args: [], clusterWide: false },
  {
    name: "chaos mode on",
    args: ["--set", "chaos.level=3,chaos.intervalMs=60000"],
    clusterWide: false,
    chaos: { level: "3", intervalMs: "60000" },
  },
  { name: "scope=cluster-wide", args: ["--set", "scope=cluster-wide"], clusterWide: true },
  {
    name: "external Redis, KEDA, ServiceMonitor, PrometheusRule, replicas, resources",
    args: [
      "--set",
      "keda.enabled=true,metrics.serviceMonitor.enabled=true,prometheusRule.enabled=true,redis.bundled=false,redis.url=redis://redis.example:6379,replicas.http=1,resources.worker.limits.memory=1Gi",
    ],
    clusterWide: false,
    keda: true,
    redisUrl: "redis://redis.example:6379",
  },
];

for (const chart of charts) {
  await t.test(`helm template (${chart.name}) passes a server-side dry run`, async (t) => {
    const yaml = helmTemplate(chart.args);
    const objects = yamlObjects(yaml);
    await checkRendering(t, { name: chart.name, yaml, objects, clusterWide: chart.clusterWide }, chart);
    t.equal(
      ofKind(objects, "Deployment").length,
      chart.redisUrl ? 3 : 4,
      "controller, worker, http (and redis when bundled)",
    );
    const lines = dryRun(yaml);
    t.equal(lines.length, objects.length, lines.join("\n"));
  });
}

await t.test(
  "on a Sentinel group (chart values or the kustomize component) every container asks the sentinels",
  async (t) => {
    const sentinels = ["sentinel-0.redis:26379", "sentinel-1.redis:26379", "sentinel-2.redis:26379"];
    const chart = helmTemplate([
      "--set",
      "redis.bundled=false,redis.sentinel.masterName=queue,redis.sentinel.tls=true,redis.passwordSecret=redis-auth,redis.caSecret=redis-ca,keda.enabled=true",
      "--set-json",
      `redis.sentinel.addresses=${JSON.stringify(sentinels)}`,
    ]);
    const kustomized = kustomizeWith("manifests/overlays/namespaced", [
      "manifests/components/redis-sentinel",
    ]);
    for (const [name, yaml] of [
      ["chart", chart],
      ["kustomize", kustomized],
    ] as const) {
      const objects = yamlObjects(yaml);
      const configMap = ofKind<{ metadata: { name: string }; data?: Record<string, string> }>(
        objects,
        "ConfigMap",
      ).find((m) => m.metadata.name === "etcd-operator-redis-sentinel");
      t.notOk(
        ofKind<V1Deployment>(objects, "Deployment").some(
          (d) =>
            d.metadata.labels?.["app.kubernetes.io/component"] === "redis" ||
            d.metadata.name.endsWith("-redis"),
        ),
        `${name}: no Redis of its own`,
      );
      const containers = operatorContainers(objects);
      t.equal(containers.length, 4, `${name}: watcher, scheduler, worker, http`);
      for (const { deployment, container } of containers) {
        const where = `${name} ${deployment}/${container.name}`;
        // The environment the container gets, with ConfigMap references resolved from the rendering.
        const env: Record<string, string> = {};
        for (const e of container.env ?? []) {
          const ref = e.valueFrom?.configMapKeyRef;
          const value = e.value ?? (ref ? configMap?.data?.[ref.key] : undefined);
          if (value !== undefined) env[e.name] = value;
        }
        t.notOk("REDIS_URL" in env, `${where}: no REDIS_URL`);
        const config = loadConfig(env);
        t.equal(config.redisSentinel?.sentinels.length, 3, `${where}: three sentinels`);
        const password = container.env?.find((e) => e.name === "REDIS_PASSWORD")?.valueFrom?.secretKeyRef;
        t.equal(password?.optional, true, `${where}: the Redis password from an optional Secret key`);
        if (name === "chart") {
          t.same(
            config.redisSentinel?.sentinels.map((s) => `${s.host}:${s.port}`),
            sentinels,
            `${where}: the sentinels given`,
          );
          t.equal(config.redisSentinel?.masterName, "queue", `${where}: the master name given`);
          t.equal(config.redisSentinel?.tls, true, `${where}: TLS`);
          t.equal(password?.name, "redis-auth", `${where}: from redis.passwordSecret`);
          t.equal(config.redisTlsCaFile, "/etc/etcd-operator/redis-ca/ca.crt", `${where}: the CA file`);
          t.ok(
            container.volumeMounts?.some(
              (m) => m.name === "redis-ca" && m.mountPath === "/etc/etcd-operator/redis-ca",
            ),
            `${where}: the CA Secret is mounted`,
          );
        }
      }
      if (name === "chart") {
        const scaled = ofKind<{ spec: { triggers: { type: string; metadata: Record<string, string> }[] } }>(
          objects,
          "ScaledObject",
        );
        const trigger = scaled[0]?.spec.triggers[0];
        t.equal(trigger?.type, "redis-sentinel", "KEDA asks the sentinels too");
        t.equal(trigger?.metadata.addresses, sentinels.join(","), "with the same addresses");
        t.equal(trigger?.metadata.sentinelMaster, "queue", "and master name");
        t.equal(trigger?.metadata.enableTLS, "true", "over TLS");
      }
      const lines = dryRun(yaml);
      t.equal(lines.length, objects.length, `${name}: ${lines.length} objects accepted`);
    }
    // The chart's own group: a StatefulSet of three, every container pointed at its pods' sentinels.
    const bundledYaml = helmTemplate(["--set", "redis.sentinel.bundled=true,keda.enabled=true"]);
    const bundled = yamlObjects(bundledYaml);
    t.notOk(
      ofKind<V1Deployment>(bundled, "Deployment").some((d) => d.metadata.name.endsWith("-redis")),
      "bundled Sentinel: no single Redis Deployment",
    );
    const set = ofKind<{ metadata: { name: string }; spec: { replicas: number; serviceName: string } }>(
      bundled,
      "StatefulSet",
    )[0];
    t.equal(set?.spec.replicas, 3, "bundled Sentinel: a StatefulSet of three");
    for (const { deployment, container } of operatorContainers(bundled)) {
      const addresses = envOf(container, "REDIS_SENTINELS")?.split(",") ?? [];
      t.same(
        addresses,
        [0, 1, 2].map((i) => `${set?.metadata.name}-${i}.${set?.spec.serviceName}.${NAMESPACE}.svc:26379`),
        `bundled Sentinel: ${deployment}/${container.name} asks the group's three sentinels`,
      );
      t.equal(
        envOf(container, "REDIS_URL"),
        undefined,
        `bundled Sentinel: ${deployment}/${container.name} has no URL`,
      );
    }
    const bundledLines = dryRun(bundledYaml);
    t.equal(bundledLines.length, bundled.length, `bundled Sentinel: ${bundledLines.length} objects accepted`);
    for (const [values, message] of [
      ["redis.bundled=true", /redis\.sentinel\.addresses needs redis\.bundled=false/],
      [
        "redis.bundled=false,redis.url=redis://x:6379",
        /redis\.url and redis\.sentinel\.addresses are both set/,
      ],
    ] as const) {
      const refused = run(helm, [
        "template",
        "eop",
        "charts/etcd-operator",
        "--set",
        values,
        "--set-json",
        `redis.sentinel.addresses=${JSON.stringify(sentinels)}`,
      ]);
      t.not(refused.status, 0, `${values} with sentinels refused`);
      t.match(refused.stderr, message, `${values}: says why`);
    }
  },
);

await t.test("the chart ships the generated CRDs", async (t) => {
  const yaml = helmTemplate(["--include-crds"]);
  const crds = ofKind(yamlObjects(yaml), "CustomResourceDefinition")
    .map((c) => c.metadata.name)
    .sort();
  t.same(crds, [
    "etcdbackups.etcd.database.coreos.com",
    "etcdclusters.etcd.database.coreos.com",
    "etcdrestores.etcd.database.coreos.com",
  ]);
  for (const file of readdirSync(join(ROOT, "manifests/crds"))) {
    t.equal(
      readFileSync(join(ROOT, "charts/etcd-operator/crds", file), "utf8"),
      readFileSync(join(ROOT, "manifests/crds", file), "utf8"),
      `charts/etcd-operator/crds/${file} is manifests/crds/${file}`,
    );
  }
});

// ---------------------------------------------------------------------------------------------------------
// RBAC for real: the operator runs a cluster as the ServiceAccount, with nothing but the overlay's rules.

const RBAC_KINDS = new Set([
  "Namespace",
  "ServiceAccount",
  "Role",
  "RoleBinding",
  "ClusterRole",
  "ClusterRoleBinding",
]);

function applyRbac(overlay: Rendered): void {
  const objects = overlay.objects.filter((o) => RBAC_KINDS.has(o.kind));
  kubectl(["apply", "-f", "-"], objects.map((o) => JSON.stringify(o)).join("\n"));
}

function deleteRbac(overlay: Rendered): void {
  const objects = overlay.objects.filter(
    (o) =>
      ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"].includes(o.kind) &&
      !o.metadata.name.endsWith("-cluster-scoped"),
  );
  kubectl(["delete", "--wait=true", "-f", "-"], objects.map((o) => JSON.stringify(o)).join("\n"));
}

/** A kubeconfig that authenticates as the operator's ServiceAccount with a short-lived token. */
function serviceAccountKubeconfig(): string {
  const token = kubectl(["create", "token", "etcd-operator", "-n", NAMESPACE, "--duration=1h"]).trim();
  const ca = kc.getCurrentCluster()?.caData ?? "";
  const path = join(cluster.dir, "operator-sa.kubeconfig");
  writeFileSync(
    path,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        { name: "local", cluster: { server: cluster.apiserverUrl, "certificate-authority-data": ca } },
      ],
      users: [{ name: "etcd-operator", user: { token } }],
      contexts: [{ name: "sa", context: { cluster: "local", user: "etcd-operator", namespace: NAMESPACE } }],
      "current-context": "sa",
    }),
    { mode: 0o600 },
  );
  return path;
}

function canI(verb: string, resource: string, namespace?: string, subresource?: string): boolean {
  const args = [
    ...["auth", "can-i", verb, resource, `--as=${OPERATOR_SA}`],
    ...(namespace ? ["-n", namespace] : []),
    ...(subresource ? [`--subresource=${subresource}`] : []),
  ];
  const result = run(assets.kubectl, ["--kubeconfig", cluster.kubeconfigPath, ...args]);
  return result.stdout.trim() === "yes";
}

async function runClusterAsServiceAccount(
  t: Test,
  options: {
    namespace: string;
    name: string;
    extraEnv: Record<string, string>;
    annotations?: Record<string, string>;
  },
) {
  const kubeconfig = serviceAccountKubeconfig();
  const processes: OperatorProcess[] = ["watcher", "worker", "scheduler"].map((role) =>
    startOperatorProcess(cluster, role, {
      KUBECONFIG: kubeconfig,
      MY_POD_NAMESPACE: NAMESPACE,
      LOG_LEVEL: "info",
      ...options.extraEnv,
    }),
  );
  try {
    const manifest: EtcdCluster = {
      apiVersion: "etcd.database.coreos.com/v1beta2",
      kind: "EtcdCluster",
      metadata: { name: options.name, namespace: options.namespace, annotations: options.annotations },
      spec: { size: 1, version: "3.6.16" },
    };
    kubectl(["apply", "-f", "-"], JSON.stringify(manifest));
    const available = await waitFor(
      `${options.namespace}/${options.name} Available under the ServiceAccount`,
      async () => {
        const c = await kube.getCluster(options.namespace, options.name);
        const ok =
          c?.status?.conditions?.some((x) => x.type === "Available" && x.status === "True") &&
          c.status?.readyMembers === 1;
        return ok ? c : undefined;
      },
      {
        timeoutMs: 120_000,
        intervalMs: 500,
        describe: async () =>
          JSON.stringify((await kube.getCluster(options.namespace, options.name))?.status),
      },
    );
    t.equal(available.status?.readyMembers, 1, "a 1-member cluster became Available");
    const events = kubectl([
      "get",
      "events",
      "-n",
      options.namespace,
      "--field-selector",
      `involvedObject.name=${options.name}`,
      "-o",
      "name",
    ]);
    t.ok(events.trim().length > 0, "the operator recorded Events");
    const logs = processes.map((p) => readFileSync(p.logFile, "utf8")).join("\n");
    t.notMatch(logs, /forbidden/i, "no request of the operator was forbidden");
    // Logs as a cluster's log pipeline gets them: one JSON object per line, at LOG_LEVEL=info and up.
    const records = logs
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map((line) => {
        try {
          return JSON.parse(line) as { level?: number; msg?: string; time?: number };
        } catch {
          return { msg: `not JSON: ${line}` };
        }
      });
    t.ok(records.length > 3, `${records.length} log lines`);
    t.same(
      records.filter(
        (r) => typeof r.level !== "number" || typeof r.time !== "number" || typeof r.msg !== "string",
      ),
      [],
      "every log line is a pino JSON record (level, time, msg)",
    );
    t.notOk(
      records.some((r) => (r.level ?? 0) < 30),
      "nothing below info is logged at LOG_LEVEL=info",
    );
    kubectl(["delete", "etcdcluster", options.name, "-n", options.namespace, "--wait=true"]);
  } finally {
    for (const p of processes) await p.kill("SIGTERM");
  }
}

const [namespacedOverlay, clusterWideOverlay] = overlays;
if (!namespacedOverlay || !clusterWideOverlay) throw new Error("both overlays must render");

await t.test("the namespaced RBAC is enough to run a cluster, and no more than intended", async (t) => {
  applyRbac(namespacedOverlay);
  t.ok(canI("create", "pods", NAMESPACE), "creates pods in its namespace");
  t.ok(
    canI("patch", "etcdclusters.etcd.database.coreos.com", NAMESPACE, "status"),
    "patches EtcdCluster status",
  );
  t.ok(canI("get", "secrets", NAMESPACE), "reads a Secret it is given the name of");
  t.ok(canI("create", "tokenreviews.authentication.k8s.io"), "asks TokenReviews");
  t.notOk(canI("list", "secrets", NAMESPACE), "cannot list Secrets");
  t.ok(canI("create", "secrets", NAMESPACE), "creates each TLS member's copy of its certificates");
  t.notOk(canI("delete", "secrets", NAMESPACE), "cannot delete Secrets (the copies go with their pods)");
  t.notOk(
    canI("update", "etcdclusters.etcd.database.coreos.com", NAMESPACE),
    "cannot change an EtcdCluster's spec",
  );
  t.notOk(canI("delete", "services", NAMESPACE), "cannot delete Services");
  t.ok(canI("patch", "services", NAMESPACE), "patches a peer Service taken over from coreos");
  t.notOk(canI("create", "pods", "default"), "nothing outside its namespace");
  t.notOk(
    canI("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io/some-other"),
    "only its own webhook configuration",
  );
  await runClusterAsServiceAccount(t, { namespace: NAMESPACE, name: "rbac-namespaced", extraEnv: {} });
  deleteRbac(namespacedOverlay);
});

await t.test("the cluster-wide RBAC is enough to run a cluster in another namespace", async (t) => {
  applyRbac(clusterWideOverlay);
  t.not(
    run(assets.kubectl, [
      "--kubeconfig",
      cluster.kubeconfigPath,
      "get",
      "role",
      "etcd-operator",
      "-n",
      NAMESPACE,
    ]).status,
    0,
    "the namespaced Role is gone",
  );
  t.ok(canI("create", "pods", "team-a"), "creates pods in any namespace");
  t.notOk(canI("list", "secrets", "team-a"), "still cannot list Secrets");
  kubectl(["create", "namespace", "team-a"]);
  await runClusterAsServiceAccount(t, {
    namespace: "team-a",
    name: "rbac-cluster-wide",
    extraEnv: { CLUSTER_WIDE: "true" },
    annotations: { [SCOPE_ANNOTATION]: SCOPE_CLUSTERWIDE },
  });
});

// ---------------------------------------------------------------------------------------------------------
// Dockerfile and docker-compose.yml (no Docker here: parsed and checked against the repository)

await t.test(
  "the Dockerfile builds a small non-root image that holds everything the operator imports",
  async (t) => {
    const instructions = dockerfileInstructions(readFileSync(join(ROOT, "Dockerfile"), "utf8"));
    const froms = instructions.filter((i) => i.keyword === "FROM");
    t.ok(froms.length >= 2, "multi-stage");
    t.match(froms[0]?.args, /^node:24[-.\w]*\s+AS\s+\w+/i, "dependencies installed with Node 24");
    const finalFrom = froms.at(-1);
    t.match(finalFrom?.args, /distroless\/nodejs24|^node:24/, "runs on Node 24 (distroless)");
    const last = instructions.slice(
      instructions.indexOf(finalFrom ?? instructions[0] ?? { keyword: "", args: "", line: 0 }),
    );
    const user = last.filter((i) => i.keyword === "USER").at(-1)?.args ?? "";
    t.match(user, /^\d+(:\d+)?$/, "USER is numeric (Kubernetes can verify runAsNonRoot)");
    t.not(user.split(":")[0], "0", "USER is not root");
    t.match(
      instructions.find((i) => i.keyword === "RUN")?.args,
      /npm ci --omit=dev/,
      "production dependencies only",
    );

    const entrypoint = execForm(
      last.find((i) => i.keyword === "ENTRYPOINT") ?? { keyword: "", args: "[]", line: 0 },
    );
    const cmd = execForm(last.find((i) => i.keyword === "CMD") ?? { keyword: "", args: "[]", line: 0 });
    t.equal(
      entrypoint[0],
      OPERATOR_IMAGE_NODE,
      "node is the entry point (exec form: signals reach it), where restore init containers find it too",
    );
    t.same(entrypoint.slice(1, -1), [...OPERATOR_NODE_FLAGS], "with the operator's node flags");
    const envs = last.filter((i) => i.keyword === "ENV").map((i) => i.args.trim());
    for (const [name, value] of Object.entries(OPERATOR_ENV))
      t.ok(envs.includes(`${name}=${value}`), `the image sets ${name}=${value} (OPERATOR_ENV)`);
    t.equal(entrypoint.at(-1), "dist/operator.js", "runs the bundle of infra/operator.ts");
    // The bundle: built in a stage of its own by infra/bundle.ts, into dist/, and copied from there.
    const bundleRun = instructions.find(
      (i) => i.keyword === "RUN" && /^node infra\/bundle\.ts$/.test(i.args.trim()),
    );
    const buildStage = froms.filter((f) => bundleRun !== undefined && f.line < bundleRun.line).at(-1);
    const stageName = /\s+AS\s+(\w+)/i.exec(buildStage?.args ?? "")?.[1];
    t.ok(stageName, "a named stage runs node infra/bundle.ts");
    t.ok(
      instructions.some(
        (i) =>
          i.keyword === "RUN" &&
          /apt-get install .*\bgcc\b.*\blibc6-dev\b/.test(i.args) &&
          i.line > (buildStage?.line ?? Number.POSITIVE_INFINITY) &&
          i.line < (bundleRun?.line ?? 0),
      ),
      "that stage installs a C compiler first: the bundle carries the malloc_trim addon (infra/native/build.ts)",
    );
    t.ok(
      last.some((i) => i.keyword === "COPY" && i.args.trim() === `--from=${stageName} /app/dist ./dist`),
      "the final image copies dist/ from that stage",
    );
    t.ok(
      last.some((i) => i.keyword === "COPY" && /^infra\b/.test(i.args.trim())),
      "and the sources, for restore init containers (infra/restore-init.ts)",
    );
    checkRole(t, roleArg(cmd), "Dockerfile CMD");

    // What the image holds: the COPY sources minus .dockerignore.
    const ignored = dockerignoreMatcher(readFileSync(join(ROOT, ".dockerignore"), "utf8"));
    const copied: string[] = [];
    for (const copy of instructions.filter((i) => i.keyword === "COPY")) {
      const { from, sources } = copySources(copy);
      if (from !== undefined) continue;
      for (const source of sources) {
        t.ok(run("test", ["-e", join(ROOT, source)]).status === 0, `COPY ${source}: exists`);
        t.notOk(ignored(source), `COPY ${source}: not excluded by .dockerignore`);
        copied.push(source);
      }
    }
    const inImage = (file: string) =>
      copied.some((c) => file === c || file.startsWith(`${c}/`)) && !ignored(file);
    const graph = importGraph("infra/operator.ts");
    t.ok(graph.files.length > 20, `${graph.files.length} modules reached from infra/operator.ts`);
    t.same(
      graph.files.filter((f) => !inImage(f)),
      [],
      "every module the operator imports is in the image",
    );
    t.ok(
      ignored("infra/local/control-plane.ts") && ignored("tests/operator.test.ts"),
      "the local control plane and tests stay out",
    );
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
      dependencies: Record<string, string>;
    };
    t.same(
      graph.packages.filter((p) => !(p in pkg.dependencies)),
      [],
      `every package it imports (${graph.packages.join(", ")}) is a production dependency`,
    );
  },
);

await t.test(
  "docker-compose.yml runs Redis, MinIO and every operator role against a mounted kubeconfig",
  async (t) => {
    const compose = parse(readFileSync(join(ROOT, "docker-compose.yml"), "utf8"), { merge: true }) as {
      services: Record<
        string,
        {
          image?: string;
          build?: string;
          command?: string[];
          environment?: Record<string, string>;
          volumes?: string[];
          depends_on?: Record<string, unknown>;
          read_only?: boolean;
          user?: string;
        }
      >;
    };
    const services = compose.services;
    t.ok(services.redis?.image?.startsWith("redis:"), "a Redis service");
    t.ok(services.minio?.image?.includes("minio"), "an S3-compatible store (MinIO)");
    const operatorServices = Object.entries(services).filter(([, s]) => s.build !== undefined);
    t.same(operatorServices.map(([name]) => name).sort(), ["http", "scheduler", "watcher", "worker"]);
    for (const [name, service] of operatorServices) {
      t.equal(service.build, ".", `${name}: built from the Dockerfile`);
      checkRole(t, roleArg(service.command), `compose ${name}`);
      t.equal(roleArg(service.command), name, `${name}: runs its own role`);
      const kubeconfig = service.environment?.KUBECONFIG ?? "";
      t.ok(
        service.volumes?.some((v) => v.endsWith(`:${kubeconfig}:ro`)),
        `${name}: KUBECONFIG is the read-only mounted file`,
      );
      t.equal(
        new URL(service.environment?.REDIS_URL ?? "redis://x").hostname,
        "redis",
        `${name}: REDIS_URL is the redis service`,
      );
      t.ok(service.depends_on && "redis" in service.depends_on, `${name}: starts after Redis`);
      // Chaos mode runs in the scheduler role: only there, and off unless CHAOS_LEVEL is given.
      const chaos = Object.keys(service.environment ?? {}).filter((k) => k.startsWith("CHAOS_"));
      if (name === "scheduler") {
        // Compose's own substitution syntax: the variable from the environment, else the default.
        t.match(
          service.environment?.CHAOS_LEVEL,
          /^\$\{CHAOS_LEVEL:-0\}$/,
          `${name}: CHAOS_LEVEL, 0 (off) by default`,
        );
        t.match(
          service.environment?.CHAOS_INTERVAL_MS,
          /^\$\{CHAOS_INTERVAL_MS:-30000\}$/,
          `${name}: CHAOS_INTERVAL_MS, 30000 by default`,
        );
        t.same(
          service.environment && {
            ...service.environment,
            CHAOS_LEVEL: undefined,
            CHAOS_INTERVAL_MS: undefined,
          },
          { ...services.worker?.environment, CHAOS_LEVEL: undefined, CHAOS_INTERVAL_MS: undefined },
          `${name}: otherwise the same environment as the other roles`,
        );
      } else {
        t.same(chaos, [], `${name}: no chaos setting`);
      }
      t.equal(service.read_only, true, `${name}: read-only root filesystem`);
      t.match(service.user, /^[1-9]\d*:\d+$/, `${name}: a non-root user`);
    }
  },
);

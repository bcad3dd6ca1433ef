// The ValidatingWebhookConfiguration that points the API server at the webhook, and the loop that
// keeps its caBundle set to the server's self-signed CA (a `kubectl apply` of the manifest would
// otherwise blank it). Choices, so a webhook that is down never blocks deletion:
// - only CREATE and UPDATE are sent (never DELETE), and not the status subresource (the operator's
//   own status writes never wait for the webhook);
// - a matchCondition skips objects that are being deleted, so removing finalizers always works;
// - failurePolicy Fail: while the webhook is down, creating or changing these objects is refused
//   rather than let through unchecked (the planner would refuse a downgrade, but would carry out a
//   5 → 1 scale-down or a TLS change); timeoutSeconds 5 keeps a slow webhook from holding kubectl.
import {
  AdmissionregistrationV1Api,
  type AdmissionregistrationV1WebhookClientConfig,
  type KubeConfig,
  type V1ValidatingWebhook,
  type V1ValidatingWebhookConfiguration,
} from "@kubernetes/client-node";
import { BACKUP_PLURAL } from "../../shared/api/etcd-backup.ts";
import { GROUP, PLURAL, VERSION } from "../../shared/api/etcd-cluster.ts";
import { RESTORE_PLURAL } from "../../shared/api/etcd-restore.ts";
import { httpStatusOf, JSON_PATCH } from "../../shared/kube.ts";
import type { Logger } from "../../shared/log.ts";
import { WEBHOOK_PATHS } from "./routes/webhook.ts";

export const DEFAULT_WEBHOOK_CONFIGURATION = "etcd-operator";
export const WEBHOOK_TIMEOUT_SECONDS = 5;

export type WebhookTarget = { url: string } | { service: { namespace: string; name: string; port?: number } };

export function validatingWebhookConfiguration(options: {
  name?: string;
  target: WebhookTarget;
  /** PEM of the CA that signed the serving certificate. */
  caCert?: string;
}): V1ValidatingWebhookConfiguration {
  const webhook = (resource: string, subresources: string[] = []): V1ValidatingWebhook => {
    const path = WEBHOOK_PATHS[resource as keyof typeof WEBHOOK_PATHS];
    const clientConfig: AdmissionregistrationV1WebhookClientConfig =
      "url" in options.target
        ? { url: `${options.target.url.replace(/\/$/, "")}${path}` }
        : { service: { ...options.target.service, path } };
    if (options.caCert) clientConfig.caBundle = Buffer.from(options.caCert).toString("base64");
    return {
      name: `${resource}.${GROUP}`,
      admissionReviewVersions: ["v1"],
      sideEffects: "NoneOnDryRun",
      failurePolicy: "Fail",
      matchPolicy: "Equivalent",
      timeoutSeconds: WEBHOOK_TIMEOUT_SECONDS,
      clientConfig,
      rules: [
        {
          apiGroups: [GROUP],
          apiVersions: [VERSION],
          operations: ["CREATE", "UPDATE"],
          resources: [resource, ...subresources.map((s) => `${resource}/${s}`)],
          scope: "Namespaced",
        },
      ],
      matchConditions: [{ name: "not-being-deleted", expression: "!has(object.metadata.deletionTimestamp)" }],
    };
  };
  return {
    apiVersion: "admissionregistration.k8s.io/v1",
    kind: "ValidatingWebhookConfiguration",
    metadata: { name: options.name ?? DEFAULT_WEBHOOK_CONFIGURATION, labels: { app: "etcd-operator" } },
    webhooks: [webhook(PLURAL, ["scale"]), webhook(BACKUP_PLURAL), webhook(RESTORE_PLURAL)],
  };
}

/** Sets caBundle on every webhook of the configuration that lacks it or has another; true when it changed. */
export async function injectCaBundle(kc: KubeConfig, name: string, caCert: string): Promise<boolean> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  const current = await api.readValidatingWebhookConfiguration({ name });
  const bundle = Buffer.from(caCert).toString("base64");
  const operations: object[] = [
    { op: "test", path: "/metadata/resourceVersion", value: current.metadata?.resourceVersion },
  ];
  (current.webhooks ?? []).forEach((webhook, index) => {
    if (webhook.clientConfig.caBundle !== bundle) {
      operations.push({ op: "add", path: `/webhooks/${index}/clientConfig/caBundle`, value: bundle });
    }
  });
  if (operations.length === 1) return false;
  await api.patchValidatingWebhookConfiguration({ name, body: operations }, JSON_PATCH);
  return true;
}

/** Keeps the caBundle set: now, then every `everyMs` (default 30 s). */
export function keepCaBundle(options: {
  kc: KubeConfig;
  name: string;
  caCert: string;
  log: Logger;
  everyMs?: number;
}): { stop(): void; firstAttempt: Promise<void> } {
  const { kc, name, caCert, log } = options;
  let warned = false;
  const attempt = async () => {
    try {
      if (await injectCaBundle(kc, name, caCert)) log.info({ configuration: name }, "webhook caBundle set");
      warned = false;
    } catch (error) {
      // 409: changed meanwhile (the test op); the next round retries. Warn once per outage, not every round.
      if (httpStatusOf(error) === 409 || warned) return;
      warned = true;
      log.warn(
        { err: error, configuration: name },
        httpStatusOf(error) === 404
          ? "ValidatingWebhookConfiguration not found; its caBundle will be set once it exists"
          : "could not set the webhook caBundle",
      );
    }
  };
  const firstAttempt = attempt();
  const timer = setInterval(() => void attempt(), options.everyMs ?? 30_000);
  timer.unref();
  return { firstAttempt, stop: () => clearInterval(timer) };
}

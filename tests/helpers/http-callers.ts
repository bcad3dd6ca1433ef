// Real Kubernetes callers for the HTTP server's tests: ServiceAccounts with (or without) RBAC
// permissions and tokens issued for them by the TokenRequest API, so TokenReview and
// SubjectAccessReview answer for real.
import { CoreV1Api, type KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { GROUP } from "../../shared/api/etcd-cluster.ts";
import { ignoreConflict } from "../../shared/kube-errors.ts";

export interface Caller {
  name: string;
  token: string;
  /** The username TokenReview reports. */
  username: string;
}

export interface CallerSpec {
  name: string;
  /** Verbs on etcdclusters and etcdbackups in the namespace. */
  verbs?: string[];
  /** May GET /metrics (a ClusterRole on the non-resource URL). */
  metrics?: boolean;
}

export async function createCaller(kc: KubeConfig, namespace: string, spec: CallerSpec): Promise<Caller> {
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const { name } = spec;
  await ignoreConflict(core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } }));
  const subject = { kind: "ServiceAccount", name, namespace };
  if (spec.verbs && spec.verbs.length > 0) {
    await ignoreConflict(
      rbac.createNamespacedRole({
        namespace,
        body: {
          metadata: { name },
          rules: [{ apiGroups: [GROUP], resources: ["etcdclusters", "etcdbackups"], verbs: spec.verbs }],
        },
      }),
    );
    await ignoreConflict(
      rbac.createNamespacedRoleBinding({
        namespace,
        body: {
          metadata: { name },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
          subjects: [subject],
        },
      }),
    );
  }
  if (spec.metrics) {
    const role = `${name}-metrics`;
    await ignoreConflict(
      rbac.createClusterRole({
        body: { metadata: { name: role }, rules: [{ nonResourceURLs: ["/metrics"], verbs: ["get"] }] },
      }),
    );
    await ignoreConflict(
      rbac.createClusterRoleBinding({
        body: {
          metadata: { name: role },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
          subjects: [subject],
        },
      }),
    );
  }
  const request = await core.createNamespacedServiceAccountToken({
    namespace,
    name,
    body: { spec: { expirationSeconds: 3600, audiences: [] } },
  });
  const token = request.status?.token;
  if (!token) throw new Error(`no token issued for ServiceAccount ${namespace}/${name}`);
  return { name, token, username: `system:serviceaccount:${namespace}:${name}` };
}

export function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

// A self-signed serving certificate that every replica of the HTTP server shares, kept in a Secret
// (HTTP_TLS_SECRET): the first replica to start makes the CA and the certificate and stores them,
// the others (and every restart) use what is stored. With a CA per process, each replica wrote its
// own CA into the webhook's caBundle in turn, so the API server trusted one replica at a time, and
// a restarted pod's webhook was refused until its new CA was written.
//
// The install (Helm chart, kustomize base) declares the Secret empty, so that uninstalling removes
// it; a Secret that is missing is created. Writes carry the resourceVersion read, so two replicas
// starting together cannot both store theirs: the one that loses reads the winner's.
import type { CoreV1Api, V1Secret } from "@kubernetes/client-node";
import { MERGE_PATCH } from "../../shared/kube.ts";
import { httpStatusOf } from "../../shared/kube-errors.ts";
import { type ServingTls, selfSignedTls } from "./tls.ts";

/** The names the stored certificate was made for, so that a change of hosts makes a new one. */
export const TLS_HOSTS_ANNOTATION = "etcd.database.coreos.com/tls-hosts";

const KEYS = { ca: "ca.crt", cert: "tls.crt", key: "tls.key" } as const;

function decoded(secret: V1Secret, key: string): string | undefined {
  const value = secret.data?.[key];
  return value ? Buffer.from(value, "base64").toString("utf8") : undefined;
}

/** What the Secret holds, when it holds a certificate made for exactly these hosts. */
function stored(secret: V1Secret, hosts: string[]): ServingTls | undefined {
  if (secret.metadata?.annotations?.[TLS_HOSTS_ANNOTATION] !== hosts.join(",")) return undefined;
  const caCert = decoded(secret, KEYS.ca);
  const cert = decoded(secret, KEYS.cert);
  const key = decoded(secret, KEYS.key);
  return caCert && cert && key ? { cert, key, caCert, source: "self-signed" } : undefined;
}

function secretBody(
  tls: ServingTls,
  hosts: string[],
): Pick<V1Secret, "data"> & {
  metadata: { annotations: Record<string, string> };
} {
  const b64 = (text: string) => Buffer.from(text).toString("base64");
  return {
    metadata: { annotations: { [TLS_HOSTS_ANNOTATION]: hosts.join(",") } },
    data: { [KEYS.ca]: b64(tls.caCert ?? ""), [KEYS.cert]: b64(tls.cert), [KEYS.key]: b64(tls.key) },
  };
}

/** The certificate stored in `name`, made and stored first when there is none for these hosts. */
export async function sharedSelfSignedTls(
  core: CoreV1Api,
  namespace: string,
  name: string,
  hosts: string[],
): Promise<ServingTls> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const secret = await core.readNamespacedSecret({ namespace, name }).catch((error: unknown) => {
      if (httpStatusOf(error) === 404) return undefined;
      throw new Error(`cannot read the serving certificate's Secret ${namespace}/${name}`, { cause: error });
    });
    const found = secret && stored(secret, hosts);
    if (found) return found;
    const made = await selfSignedTls(hosts);
    const body = secretBody(made, hosts);
    try {
      if (!secret) {
        await core.createNamespacedSecret({
          namespace,
          body: { metadata: { name, ...body.metadata }, type: "Opaque", data: body.data },
        });
      } else {
        // The resourceVersion makes the write fail (409) if another replica stored one meanwhile.
        await core.patchNamespacedSecret(
          {
            namespace,
            name,
            body: {
              ...body,
              metadata: { ...body.metadata, resourceVersion: secret.metadata?.resourceVersion },
            },
          },
          MERGE_PATCH,
        );
      }
      return made;
    } catch (error) {
      if (httpStatusOf(error) !== 409) {
        throw new Error(`cannot store the serving certificate in Secret ${namespace}/${name}`, {
          cause: error,
        });
      }
      // Another replica stored its certificate first: read and use that one.
    }
  }
  throw new Error(`Secret ${namespace}/${name} kept changing while the serving certificate was stored`);
}

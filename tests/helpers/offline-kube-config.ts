// A KubeConfig naming an address nothing listens on, for building the operator's parts (its HTTP
// routes, its metric registries) in a test without a cluster: they contact the API server only
// when called.
import { KubeConfig } from "@kubernetes/client-node";

export function offlineKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "none", server: "https://127.0.0.1:9" }],
    users: [{ name: "none" }],
    contexts: [{ name: "none", cluster: "none", user: "none" }],
    currentContext: "none",
  });
  return kc;
}

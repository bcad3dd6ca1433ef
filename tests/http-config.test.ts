// The HTTP server's settings: defaults, and the mistakes loadConfig refuses before anything starts.
import t from "tap";
import { ConfigError, loadConfig, MIN_STATIC_TOKEN_LENGTH } from "../shared/config.ts";

t.test("defaults: port 8080, no TLS, metrics behind a token, 600 requests a minute", async (t) => {
  const config = loadConfig({});
  t.equal(config.httpPort, 8080);
  t.equal(config.httpHost, "0.0.0.0");
  t.equal(config.httpTlsSelfSigned, false);
  t.equal(config.httpTlsCertFile, undefined);
  t.same(config.httpTlsHosts, ["localhost", "127.0.0.1"]);
  t.equal(config.metricsRequireAuth, true);
  t.equal(config.httpRateLimitPerMinute, 600);
  t.equal(config.metricsPort, 0);
  t.equal(config.httpStaticToken, undefined);
});

t.test("settings are read from the environment", async (t) => {
  const token = "x".repeat(MIN_STATIC_TOKEN_LENGTH);
  const config = loadConfig({
    HTTP_PORT: "0",
    HTTP_TLS_SELF_SIGNED: "true",
    HTTP_TLS_HOSTS: "etcd-operator.ops.svc, 127.0.0.1",
    HTTP_STATIC_TOKEN: token,
    METRICS_REQUIRE_AUTH: "false",
    WEBHOOK_CONFIGURATION: "my-webhooks",
    HTTP_RATE_LIMIT_PER_MINUTE: "5",
  });
  t.equal(config.httpPort, 0);
  t.equal(config.httpTlsSelfSigned, true);
  t.same(config.httpTlsHosts, ["etcd-operator.ops.svc", "127.0.0.1"]);
  t.equal(config.httpStaticToken, token);
  t.equal(config.metricsRequireAuth, false);
  t.equal(config.webhookConfigurationName, "my-webhooks");
  t.equal(config.httpRateLimitPerMinute, 5);
});

t.test("mistakes are refused with the setting's name, never echoing a token", async (t) => {
  const short = "short-secret";
  const error = t.throws(() => loadConfig({ HTTP_STATIC_TOKEN: short }));
  t.type(error, ConfigError);
  t.match(String(error), /HTTP_STATIC_TOKEN must be at least 24 characters/);
  t.notMatch(String(error), short, "the rejected token is not in the message");
  t.throws(
    () => loadConfig({ HTTP_TLS_CERT_FILE: "/tls/tls.crt" }),
    /HTTP_TLS_CERT_FILE and HTTP_TLS_KEY_FILE go together/,
  );
  t.throws(() => loadConfig({ HTTP_PORT: "70000" }), /HTTP_PORT must be a whole number from 0 to 65535/);
  t.throws(() => loadConfig({ METRICS_REQUIRE_AUTH: "maybe" }), /METRICS_REQUIRE_AUTH must be true or false/);
});

t.test(
  "the memory keeper looks every 2 s, collects after 8 MiB of growth, trims after 4; 0 turns each off",
  async (t) => {
    const defaults = loadConfig({});
    t.equal(defaults.memoryGcIntervalMs, 2_000);
    t.equal(defaults.memoryGcGrowthMiB, 8);
    t.equal(defaults.memoryTrimGrowthMiB, 4);
    const set = loadConfig({
      MEMORY_GC_INTERVAL_MS: "0",
      MEMORY_GC_GROWTH_MIB: "32",
      MEMORY_TRIM_GROWTH_MIB: "0",
    });
    t.equal(set.memoryGcIntervalMs, 0);
    t.equal(set.memoryGcGrowthMiB, 32);
    t.equal(set.memoryTrimGrowthMiB, 0);
    t.throws(() => loadConfig({ MEMORY_GC_GROWTH_MIB: "0" }), ConfigError);
    t.throws(() => loadConfig({ MEMORY_TRIM_GROWTH_MIB: "-1" }), ConfigError);
  },
);

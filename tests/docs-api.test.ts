// docs/api.md is what infra/docs/api-reference.ts makes of the CRDs in manifests/crds/, so the API
// reference changes with the schema or the tests fail; and what it says is what the CRDs say.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import t from "tap";
import { apiReferencePage, CRD_DIR, PAGE } from "../infra/docs/api-reference.ts";
import { fieldsOf, typeName } from "../infra/docs/crd-fields.ts";
import { readCrds } from "../infra/docs/crd-model.ts";
import { code, inline, value } from "../infra/docs/markdown.ts";
import { writeOrCheck } from "../infra/docs/page.ts";
import { isSchema } from "../infra/docs/schema.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const page = readFileSync(PAGE, "utf8");

/** The part of the page about one kind: from its heading to the next kind's. */
function section(kind: string): string {
  const start = page.indexOf(`\n## ${kind}\n`);
  const end = page.indexOf("\n## ", start + 1);
  return start < 0 ? "" : page.slice(start, end < 0 ? undefined : end);
}

/** A table row's cells, trimmed of Biome's padding. */
function row(text: string, path: string): string[] | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`| \`${path}\` `));
  return line
    ?.split(/(?<!\\)\|/)
    .slice(1, -1)
    .map((c) => c.trim());
}

t.test("docs/api.md is what the CRDs give", async (t) => {
  t.equal(page, apiReferencePage(), "current (else run node infra/docs/api-reference.ts)");
  const check = execFileSync(process.execPath, ["infra/docs/api-reference.ts", "--check"], {
    cwd: ROOT,
    encoding: "utf8",
  });
  t.equal(check, "", "--check passes on it, silently");
});

t.test("--check names a stale page and the command that fixes it", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "docs-api-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "api.md");
  writeFileSync(file, `${page}\nan edit by hand\n`);
  t.match(
    writeOrCheck(file, page, true, "node infra/docs/api-reference.ts"),
    /api\.md is stale: run node infra\/docs\/api-reference\.ts/,
  );
  t.equal(readFileSync(file, "utf8"), `${page}\nan edit by hand\n`, "--check writes nothing");
  t.equal(writeOrCheck(file, page, false, "x"), undefined, "writing");
  t.equal(writeOrCheck(file, page, true, "x"), undefined, "then current");
});

t.test("EtcdCluster: spec.size and spec.version with their types, bounds and defaults", async (t) => {
  const cluster = section("EtcdCluster");
  t.ok(cluster.includes("`etcd.database.coreos.com/v1beta2`"), "group and version");
  t.same(row(cluster, "spec.size")?.slice(0, 5), ["`spec.size`", "`integer`", "yes", "", "1 to 9"]);
  t.same(row(cluster, "spec.version")?.slice(0, 4), ["`spec.version`", "`string`", "", "`3.7.3`"]);
  t.same(row(cluster, "spec.repository")?.[3], "`quay.io/coreos/etcd`");
  t.same(row(cluster, "spec.pod.labels")?.[1], "`map[string]string`");
  t.same(row(cluster, "spec.pod.etcdEnv[].name")?.slice(0, 3), [
    "`spec.pod.etcdEnv[].name`",
    "`string`",
    "yes",
  ]);
  t.match(row(cluster, "status.phase")?.[4], /one of `""`, `Creating`, `Running`, `Failed`/);
  t.match(
    cluster,
    /`scale`.*replicas `\.spec\.size`, current `\.status\.size`, label selector `\.status\.selector`/,
  );
  t.match(
    cluster,
    /\| Ready +\| `integer` +\| `\.status\.readyMembers` +\| `kubectl get` +\|/,
    "a printer column",
  );
  t.match(cluster, /short names `etcd`/);
  t.match(cluster, /- the object: metadata\.name must be at most 52 characters/, "the object's CEL rule");
});

t.test("EtcdBackup and EtcdRestore: their storage type fields", async (t) => {
  const backup = section("EtcdBackup");
  t.same(row(backup, "spec.storageType")?.slice(0, 3), ["`spec.storageType`", "`string`", "yes"]);
  t.match(row(backup, "spec.storageType")?.[4], /one of `S3`, `ABS`, `GCS`, `OSS`/);
  t.same(row(backup, "spec.s3.path")?.slice(1, 3), ["`string`", "yes"]);
  t.match(backup, /\| Revision +\| `integer` +\| `\.status\.etcdRevision` +\| `kubectl get -o wide` +\|/);
  const restore = section("EtcdRestore");
  t.match(row(restore, "spec.backupStorageType")?.[4], /one of `S3`, `ABS`, `GCS`, `OSS`/);
  t.match(restore, /- the object: metadata\.name must be the same as spec\.etcdCluster\.name/);
});

t.test("every field of every CRD has its row", async (t) => {
  for (const crd of readCrds(CRD_DIR)) {
    const text = section(crd.kind);
    t.ok(text, `${crd.kind} has a section`);
    for (const version of crd.versions) {
      const properties = isSchema(version.schema.properties) ? version.schema.properties : {};
      for (const part of ["spec", "status"]) {
        const schema = properties[part];
        if (!isSchema(schema)) continue;
        for (const field of fieldsOf(schema, part, false).fields) {
          if (!row(text, field.path)) t.fail(`${crd.kind}: ${field.path} has no row`);
        }
      }
    }
    t.pass(`${crd.kind}: every field`);
  }
});

t.test("schema text cannot break a table or turn into HTML", async (t) => {
  t.equal(inline("<bucket>/<key> a|b"), "\\<bucket>/\\<key> a\\|b");
  t.equal(
    inline('"etcd_*" and ETCD_AUTO_TLS'),
    '"etcd\\_\\*" and ETCD_AUTO_TLS',
    "only a `_` that could open emphasis",
  );
  t.equal(inline("files `a|b` and\n  `c_*`"), "files `a\\|b` and `c_*`", "code spans stay code");
  t.equal(code("^$|^rediss?://"), "`^$\\|^rediss?://`");
  t.equal(value(""), '`""`');
  t.equal(value(8000), "`8000`");
  t.equal(typeName({ type: "array", items: { type: "string" } }), "[]string");
  t.equal(typeName({ type: "object", additionalProperties: { type: "string" } }), "map[string]string");
});

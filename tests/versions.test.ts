// etcd upgrade paths: patch releases freely, one minor at a time through the newest patch we
// build, downgrades refused.
import t from "tap";
import { compareVersions, upgradePath } from "../shared/etcd-versions.ts";

t.test("versions compare numerically", async (t) => {
  t.ok(compareVersions("3.5.10", "3.5.9") > 0);
  t.ok(compareVersions("3.10.0", "3.9.9") > 0);
  t.equal(compareVersions("v3.6.16", "3.6.16"), 0);
});

t.test("upgrade paths step through each minor at its newest built patch", async (t) => {
  t.same(upgradePath("3.7.3", "3.7.3"), { ok: true, steps: [] });
  t.same(upgradePath("3.5.1", "3.5.35"), { ok: true, steps: ["3.5.35"] }, "patch upgrades directly");
  t.same(upgradePath("3.5.35", "3.6.16"), { ok: true, steps: ["3.6.16"] });
  t.same(upgradePath("3.5.35", "3.7.3"), { ok: true, steps: ["3.6.16", "3.7.3"] }, "3.5 → 3.6 → 3.7");
  t.same(
    upgradePath("3.5.20", "3.7.3"),
    { ok: true, steps: ["3.5.35", "3.6.16", "3.7.3"] },
    "newest 3.5 patch first",
  );
  t.same(upgradePath("3.4.23", "3.6.16"), { ok: true, steps: ["3.5.35", "3.6.16"] }, "from an unbuilt minor");
});

t.test("downgrades and missing minors are refused with a reason", async (t) => {
  const down = upgradePath("3.7.3", "3.6.16");
  t.same(down.ok ? "" : down.reason, "downgrade");
  t.match(down.ok ? "" : down.message, /older than the running 3\.7\.3/);
  const patchDown = upgradePath("3.6.16", "3.6.4");
  t.same(patchDown.ok ? "" : patchDown.reason, "downgrade");
});

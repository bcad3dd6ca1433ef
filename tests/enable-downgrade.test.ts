// enable-downgrade is idempotent: etcd's answers when a downgrade is enabled already count as done.
// (Found by the chaos-steps suite: the step matched a text etcd never sends, so the look after an
// enable, before the leader lowered the cluster version, failed the step.)
import { EtcdError } from "etcd3";
import t from "tap";
import { downgradeAlreadyEnabled, downgradeUnderWay } from "../functions/enable-downgrade.ts";

t.test("etcd's 'downgrade job in progress' means enabled already", async (t) => {
  // What etcd3 throws for ErrGRPCDowngradeInProcess (etcd 3.6 and 3.7 send the same text).
  const inProgress = new EtcdError(
    "9 FAILED_PRECONDITION: etcdserver: cluster has a downgrade job in progress",
  );
  t.equal(downgradeAlreadyEnabled(inProgress), true);
  t.equal(downgradeAlreadyEnabled(new Error("wrapped", { cause: inProgress })), true, "also as a cause");
  for (const other of [
    "9 FAILED_PRECONDITION: etcdserver: invalid downgrade target version",
    "14 UNAVAILABLE: No connection established",
    "etcdserver: no inflight downgrade job",
  ]) {
    t.equal(downgradeAlreadyEnabled(new EtcdError(other)), false, other);
  }
  t.equal(downgradeAlreadyEnabled("not an error"), false);
});

t.test("a refused target counts as done once the cluster version is at the target's minor", async (t) => {
  // etcd checks the target first: after the leader lowered the cluster version to 3.6, a retry of
  // "enable 3.6" is refused as an invalid target (found by chaos-steps: a worker killed after the
  // enable, the next one failed the step).
  const refused = new Error("etcd refused to downgrade to 3.6.0", {
    cause: new EtcdError("3 INVALID_ARGUMENT: etcdserver: invalid downgrade target version"),
  });
  t.equal(downgradeUnderWay(refused, "3.6.0", "3.6.16"), true, "lowered already: under way");
  t.equal(downgradeUnderWay(refused, "3.7.0", "3.6.16"), false, "still 3.7: a real refusal");
  t.equal(downgradeUnderWay(refused, undefined, "3.6.16"), false, "version unknown: a real refusal");
  t.equal(
    downgradeUnderWay(new EtcdError("14 UNAVAILABLE: No connection established"), "3.6.0", "3.6.16"),
    false,
    "another error",
  );
});

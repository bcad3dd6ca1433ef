// enable-downgrade is idempotent: etcd's answer when a downgrade is enabled already counts as done.
// (Found by the chaos-steps suite: the step matched a text etcd never sends, so the look after an
// enable, before the leader lowered the cluster version, failed the step.)
import { EtcdError } from "etcd3";
import t from "tap";
import { downgradeAlreadyEnabled } from "../functions/enable-downgrade.ts";

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

// Unit tests of the reconcile planner: each rule, and above all that no plan ever leaves fewer
// than a majority of voting members healthy.
import t from "tap";
import {
  DEFRAG_COOLDOWN_MS,
  majority,
  type Observation,
  type PodView,
  planNextStep,
  STARTUP_GRACE_MS,
} from "../functions/plan.ts";
import { sameStatus } from "../functions/reconcile.ts";
import type { NormalizedSpec } from "../shared/api/etcd-cluster.ts";
import { normalizedMaintenance } from "../shared/api/validate-etcd-cluster.ts";
import type { EndpointStatus, MemberInfo } from "../shared/etcd-members.ts";

const NOW = 1_000_000_000;

function spec(size: number): NormalizedSpec {
  return {
    size,
    repository: "quay.io/coreos/etcd",
    version: "3.7.3",
    paused: false,
    pod: {},
    maintenance: normalizedMaintenance(undefined),
  };
}

function pod(name: string, extra: Partial<PodView> = {}): PodView {
  return {
    name,
    ip: `10.0.0.${name.length}`,
    phase: "Running" as const,
    ready: true,
    terminating: false,
    createdAtMs: NOW - 600_000,
    ...extra,
  };
}

function member(name: string, id: string, extra: Partial<MemberInfo> = {}): MemberInfo {
  return {
    id,
    name,
    peerURLs: [`http://${name || "x"}.c.default.svc:2380`],
    clientURLs: [],
    isLearner: false,
    ...extra,
  };
}

function ok(name: string, leaderId = "1"): [string, EndpointStatus] {
  return [name, { endpoint: `http://${name}:2379`, ok: true, leaderId, version: "3.7.3" }];
}

function down(name: string): [string, EndpointStatus] {
  return [name, { endpoint: `http://${name}:2379`, ok: false, error: "timeout" }];
}

function observation(partial: Partial<Observation> & { size: number }): Observation {
  return {
    nowMs: NOW,
    cluster: { metadata: { name: "c", namespace: "default", uid: "u" } } as Observation["cluster"],
    spec: spec(partial.size),
    pods: [],
    services: { peer: true, client: true },
    members: undefined,
    health: new Map(),
    hadMembers: false,
    ...partial,
  };
}

const three = () => ({
  pods: [pod("a"), pod("b"), pod("c")],
  members: [member("a", "1"), member("b", "2"), member("c", "3")],
});

t.test("majority", async (t) => {
  t.same([1, 2, 3, 4, 5].map(majority), [1, 2, 2, 3, 3]);
});

t.test(
  "a new cluster is seeded in one step, Services included; a formed one gets its Services back first",
  async (t) => {
    const noPeer = { peer: false, client: true };
    t.same(planNextStep(observation({ size: 3, services: noPeer })), { kind: "seed" });
    t.same(planNextStep(observation({ size: 3 })), { kind: "seed" });
    const planned = ["c-a", "c-b"];
    t.same(
      planNextStep(
        observation({
          size: 2,
          services: noPeer,
          pods: [pod("c-a", { bootstrap: planned, ready: false, createdAtMs: NOW - 1000 })],
        }),
      ),
      { kind: "seed", names: planned },
      "a bootstrap cut short is finished in the step that brings its Services back",
    );
    t.same(planNextStep(observation({ size: 3, services: noPeer, ...three() })), { kind: "ensure-services" });
    t.same(
      planNextStep(
        observation({ size: 3, services: { peer: true, client: true, budget: false }, ...three() }),
      ),
      { kind: "ensure-services" },
    );
    t.same(
      planNextStep(
        observation({ size: 3, services: noPeer, hadMembers: true, pods: [], members: undefined }),
      ),
      { kind: "ensure-services" },
      "a cluster that lost every member is never seeded again, with or without its Services",
    );
  },
);

t.test("a bootstrap cut short is finished with the same member names", async (t) => {
  const planned = ["c-a", "c-b", "c-c"];
  const step = planNextStep(
    observation({
      size: 3,
      pods: [pod("c-a", { bootstrap: planned, ready: false, createdAtMs: NOW - 1000 })],
    }),
  );
  t.same(step, { kind: "seed", names: planned });
  const complete = planNextStep(
    observation({
      size: 3,
      pods: planned.map((n) => pod(n, { bootstrap: planned, ready: false, createdAtMs: NOW - 1000 })),
    }),
  );
  t.equal(complete.kind, "wait", "all bootstrap pods exist: wait for them to form the cluster");
});

t.test("losing every pod of a formed cluster is reported, never silently re-seeded", async (t) => {
  t.same(planNextStep(observation({ size: 3, hadMembers: true })), { kind: "all-members-lost" });
});

t.test("members that do not answer yet are waited for, then reported as quorum lost", async (t) => {
  const young = observation({ size: 1, pods: [pod("a", { createdAtMs: NOW - 1000, ready: false })] });
  t.equal(planNextStep(young).kind, "wait");
  const old = observation({
    size: 1,
    pods: [pod("a", { createdAtMs: NOW - STARTUP_GRACE_MS - 1, ready: false })],
  });
  t.equal(planNextStep(old).kind, "quorum-lost");
});

t.test("a healthy cluster of the declared size is steady; smaller grows, larger shrinks", async (t) => {
  const { pods, members } = three();
  const health = new Map([ok("a"), ok("b"), ok("c")]);
  t.same(planNextStep(observation({ size: 3, pods, members, health })), { kind: "steady" });
  t.same(planNextStep(observation({ size: 5, pods, members, health })), { kind: "add-member" });
  const shrink = planNextStep(observation({ size: 1, pods, members, health }));
  t.equal(shrink.kind, "remove-member");
  if (shrink.kind === "remove-member") {
    t.not(shrink.memberId, "1", "the leader (member 1) is never the one removed");
    t.equal(shrink.reason, "scale-down");
  }
});

t.test("no scaling while a voter is unhealthy, and never below quorum", async (t) => {
  const { pods, members } = three();
  const health = new Map([ok("a"), ok("b"), down("c")]);
  t.equal(
    planNextStep(observation({ size: 5, pods, members, health })).kind,
    "wait",
    "no add while c is sick",
  );
  t.equal(
    planNextStep(observation({ size: 1, pods, members, health })).kind,
    "wait",
    "no removal while c is sick",
  );
});

t.test("a member whose pod is gone is removed (to be replaced) only when quorum allows", async (t) => {
  const members = [member("a", "1"), member("b", "2"), member("c", "3")];
  const gone = planNextStep(
    observation({ size: 3, pods: [pod("a"), pod("b")], members, health: new Map([ok("a"), ok("b")]) }),
  );
  t.same(gone, { kind: "remove-member", name: "c", memberId: "3", reason: "dead" });
  const twoGone = planNextStep(
    observation({ size: 3, pods: [pod("a")], members, health: new Map([ok("a")]) }),
  );
  t.equal(
    twoGone.kind,
    "quorum-lost",
    "with 1 of 3 left, removing would not restore quorum: stop and report",
  );
});

t.test("a half-done add is finished: the member exists in etcd but its pod was never created", async (t) => {
  const members = [
    member("a", "1"),
    { ...member("", "9", { isLearner: true }), peerURLs: ["http://c-new.c.default.svc:2380"] },
  ];
  const step = planNextStep(observation({ size: 2, pods: [pod("a")], members, health: new Map([ok("a")]) }));
  t.same(step, { kind: "create-member-pod", name: "c-new", memberId: "9" });
});

t.test("a learner is promoted once its pod is Ready, and waited for before", async (t) => {
  const members = [member("a", "1"), member("n", "9", { isLearner: true })];
  const starting = observation({
    size: 2,
    pods: [pod("a"), pod("n", { ready: false })],
    members,
    health: new Map([ok("a"), down("n")]),
  });
  t.equal(planNextStep(starting).kind, "wait");
  const readyLearner = observation({
    size: 2,
    pods: [pod("a"), pod("n")],
    members,
    health: new Map([ok("a"), ok("n")]),
  });
  t.same(planNextStep(readyLearner), { kind: "promote-member", name: "n", memberId: "9" });
});

t.test("a learner that answers with a leader is promoted before its pod turns Ready", async (t) => {
  const members = [member("a", "1"), member("n", "9", { isLearner: true })];
  const following = observation({
    size: 2,
    pods: [pod("a"), pod("n", { ready: false })],
    members,
    health: new Map([ok("a"), ok("n")]),
  });
  t.same(planNextStep(following), { kind: "promote-member", name: "n", memberId: "9" });
  const noLeaderYet = observation({
    size: 2,
    pods: [pod("a"), pod("n", { ready: false })],
    members,
    health: new Map([ok("a"), ok("n", "0")]),
  });
  t.equal(planNextStep(noLeaderYet).kind, "wait", "one that knows no leader yet is waited for");
  const ended = observation({
    size: 2,
    pods: [pod("a"), pod("n", { ready: false, phase: "Failed" })],
    members,
    health: new Map([ok("a"), ok("n")]),
  });
  t.match(planNextStep(ended), { kind: "remove-member", memberId: "9" }, "one whose pod ended is removed");
});

t.test("a pod that is no member is deleted", async (t) => {
  const step = planNextStep(
    observation({
      size: 1,
      pods: [pod("a"), pod("stray")],
      members: [member("a", "1")],
      health: new Map([ok("a"), down("stray")]),
    }),
  );
  t.same(step, { kind: "delete-pod", name: "stray", reason: "it is not a member of the etcd cluster" });
});

t.test("no plan ever removes a member when that leaves fewer than a majority healthy", async (t) => {
  // Exhaustive over small clusters: every combination of size, member count and health.
  let checked = 0;
  for (let n = 1; n <= 5; n++) {
    for (let mask = 0; mask < 1 << n; mask++) {
      for (let size = 1; size <= 5; size++) {
        const names = Array.from({ length: n }, (_, i) => `m${i}`);
        const members = names.map((name, i) => member(name, String(i + 1)));
        const health = new Map(names.map((name, i) => ((mask >> i) & 1 ? ok(name) : down(name))));
        const step = planNextStep(
          observation({ size, pods: names.map((name) => pod(name)), members, health }),
        );
        checked++;
        if (step.kind !== "remove-member") continue;
        const healthy = names.filter((_, i) => (mask >> i) & 1).length;
        const removedHealthy = health.get(step.name)?.ok ? 1 : 0;
        t.ok(
          healthy - removedHealthy >= majority(n - 1),
          `n=${n} healthy=${healthy} size=${size}: quorum kept`,
        );
      }
    }
  }
  t.ok(checked > 100);
});

t.test(
  "an upgrade goes one member at a time, followers first, the leader last after moving leadership",
  async (t) => {
    const members = [member("a", "1"), member("b", "2"), member("c", "3")];
    const at = (versions: Record<string, string>) =>
      ["a", "b", "c"].map((n) => pod(n, { version: versions[n] }));
    const running = (versions: Record<string, string>) =>
      new Map(
        ["a", "b", "c"].map((n) => [n, { endpoint: n, ok: true, leaderId: "1", version: versions[n] }]),
      );
    const o = (pods: Record<string, string>, run: Record<string, string>, clusterVersion = "3.5.0") =>
      observation({
        size: 3,
        pods: at(pods),
        members,
        health: running(run),
        spec: { ...spec(3), version: "3.7.3" },
        clusterVersion,
      });
    const old = { a: "3.5.35", b: "3.5.35", c: "3.5.35" };
    const first = planNextStep(o(old, old));
    t.same(
      first,
      { kind: "upgrade-member", name: "b", memberId: "2", from: "3.5.35", to: "3.6.16" },
      "a follower first, to 3.6 (not 3.7)",
    );
    const midway = { a: "3.5.35", b: "3.6.16", c: "3.5.35" };
    t.equal(planNextStep(o(midway, old)).kind, "wait", "waits until b runs what its pod says");
    t.same(planNextStep(o(midway, midway)), {
      kind: "upgrade-member",
      name: "c",
      memberId: "3",
      from: "3.5.35",
      to: "3.6.16",
    });
    const leaderLeft = { a: "3.5.35", b: "3.6.16", c: "3.6.16" };
    const move = planNextStep(o(leaderLeft, leaderLeft));
    t.equal(move.kind, "move-leader", "leadership moves off the last old member");
    const all36 = { a: "3.6.16", b: "3.6.16", c: "3.6.16" };
    t.equal(
      planNextStep(o(old, old, "")).kind,
      "wait",
      "no minor step before etcd reports its cluster version",
    );
    t.same(
      planNextStep(o(all36, all36, "3.6.0")),
      { kind: "drain-old-log" },
      "before 3.7, every member snapshots past the pre-3.6 log entries 3.7 cannot read",
    );
    t.same(
      planNextStep({ ...o(all36, all36, "3.6.0"), oldLogDrained: true }),
      { kind: "upgrade-member", name: "b", memberId: "2", from: "3.6.16", to: "3.7.3" },
      "then 3.6 → 3.7 member by member",
    );
    // Found by the chaos-steps suite: a downgrade asked for right after an upgrade reported Stable
    // saw the cluster version still at the old minor and skipped etcd's downgrade enable.
    const all37 = { a: "3.7.3", b: "3.7.3", c: "3.7.3" };
    t.match(
      planNextStep(o(all37, all37, "3.6.0")),
      { kind: "wait", reason: "ClusterVersionPending" },
      "every member on 3.7: not done until etcd raised its cluster version",
    );
    t.same(planNextStep(o(all37, all37, "3.7.0")), { kind: "steady" }, "then steady");
    const lostC = o(all37, all37, "3.6.0");
    t.same(
      planNextStep({
        ...lostC,
        pods: lostC.pods.filter((p) => p.name !== "c"),
        members: members.filter((m) => m.name !== "c"),
      }),
      { kind: "add-member" },
      "a lost member is replaced without waiting for the cluster version",
    );
    t.same(
      planNextStep(o(all37, all37, "")),
      { kind: "steady" },
      "an undecided cluster version holds nothing up",
    );
    const unhealthy = observation({
      size: 3,
      pods: at(old),
      members,
      health: new Map([ok("a"), ok("b"), down("c")]),
      spec: { ...spec(3), version: "3.7.3" },
    });
    t.equal(planNextStep(unhealthy).kind, "wait", "never while a voter is unhealthy");
    const downgrade = observation({
      size: 3,
      pods: at(all36),
      members,
      health: running(all36),
      spec: { ...spec(3), version: "3.5.35" },
    });
    t.equal(planNextStep(downgrade).kind, "version-refused", "a downgrade is refused");
  },
);

t.test("a voter unhealthy past the grace period is replaced, only when quorum allows", async (t) => {
  const members = [member("a", "1"), member("b", "2"), member("c", "3")];
  const pods = (stuckFor: number) => [
    pod("a"),
    pod("b"),
    pod("c", { ready: false, notReadyForMs: stuckFor }),
  ];
  const health = new Map([ok("a"), ok("b"), down("c")]);
  t.equal(
    planNextStep(observation({ size: 3, pods: pods(5_000), members, health, unhealthyGraceMs: 30_000 })).kind,
    "wait",
  );
  t.same(
    planNextStep(observation({ size: 3, pods: pods(31_000), members, health, unhealthyGraceMs: 30_000 })),
    {
      kind: "remove-member",
      name: "c",
      memberId: "3",
      reason: "dead",
    },
  );
  const twoSick = new Map([ok("a"), down("b"), down("c")]);
  const stuck = [
    pod("a"),
    pod("b", { ready: false, notReadyForMs: 99_000 }),
    pod("c", { ready: false, notReadyForMs: 99_000 }),
  ];
  t.equal(
    planNextStep(observation({ size: 3, pods: stuck, members, health: twoSick, unhealthyGraceMs: 30_000 }))
      .kind,
    "wait",
    "with 1 of 3 healthy, removing a member would not restore quorum",
  );
});

t.test(
  "a rolling change waits for full strength: a member lost mid-upgrade is replaced before the next goes",
  async (t) => {
    const names = ["a", "b", "c", "d", "e"];
    // Mid 3.5 → 3.6 on 5 members: a upgraded, d lost and removed; the rest healthy on 3.5.
    const versions: Record<string, string> = {
      a: "3.6.16",
      b: "3.5.35",
      c: "3.5.35",
      d: "3.5.35",
      e: "3.5.35",
    };
    const o = (present: string[]) =>
      observation({
        size: 5,
        pods: present.map((n) => pod(n, { version: versions[n] })),
        members: present.map((n) => member(n, String(names.indexOf(n) + 1))),
        health: new Map(
          present.map((n) => [n, { endpoint: n, ok: true, leaderId: "1", version: versions[n] }]),
        ),
        spec: { ...spec(5), version: "3.6.16" },
        clusterVersion: "3.5.0",
      });
    t.same(
      planNextStep(o(["a", "b", "c", "e"])),
      { kind: "add-member", version: "3.5.35" },
      "4 of 5 voters: the lost member is replaced (at the version the cluster runs), nobody upgraded",
    );
    t.match(
      planNextStep(o(names)),
      { kind: "upgrade-member", to: "3.6.16" },
      "at full strength the upgrade goes on",
    );
    // The same for a downgrade etcd was told of: no member replaced below full strength.
    const downgrade = observation({
      ...o(["a", "b", "c", "e"]),
      size: 5,
      spec: { ...spec(5), version: "3.5.35" },
      allowDowngrade: true,
      clusterVersion: "3.5.0",
    });
    t.same(
      planNextStep(downgrade),
      { kind: "add-member" },
      "a downgrade also replaces the lost member first",
    );
  },
);

t.test(
  "a member whose pod ended (Failed or Succeeded) is replaced at once, when quorum allows",
  async (t) => {
    const { members } = three();
    const health = new Map([ok("a"), ok("b"), down("c")]);
    const failed = [pod("a"), pod("b"), pod("c", { phase: "Failed", ready: false, notReadyForMs: 1_000 })];
    t.same(
      planNextStep(observation({ size: 3, pods: failed, members, health })),
      { kind: "remove-member", name: "c", memberId: "3", reason: "dead" },
      "no unhealthy grace for a pod that will never run again",
    );
    const succeeded = [
      pod("a"),
      pod("b"),
      pod("c", { phase: "Succeeded", ready: false, notReadyForMs: 1_000 }),
    ];
    t.equal(planNextStep(observation({ size: 3, pods: succeeded, members, health })).kind, "remove-member");
    t.equal(
      planNextStep(
        observation({
          size: 3,
          pods: [pod("a"), pod("b"), pod("c", { ready: false, notReadyForMs: 1_000 })],
          members,
          health,
        }),
      ).kind,
      "wait",
      "a Running pod that is not Ready yet still gets its grace",
    );
    const claims = ["a", "b", "c"].map((m) => ({ name: `${m}-pvc`, member: m, terminating: false }));
    t.match(
      planNextStep(observation({ size: 3, pods: failed, members, health, claims })),
      { kind: "delete-pod", name: "c" },
      "on a volume its pod goes, so that it comes back as itself",
    );
    const twoFailed = [
      pod("a"),
      pod("b", { phase: "Failed", ready: false }),
      pod("c", { phase: "Failed", ready: false }),
    ];
    t.equal(
      planNextStep(
        observation({ size: 3, pods: twoFailed, members, health: new Map([ok("a"), down("b"), down("c")]) }),
      ).kind,
      "wait",
      "never when 1 of 3 is healthy: removing a member would not restore quorum",
    );
    const learner = [...members, member("d", "4", { isLearner: true })];
    t.same(
      planNextStep(
        observation({
          size: 4,
          pods: [pod("a"), pod("b"), pod("c"), pod("d", { phase: "Failed", ready: false })],
          members: learner,
          health: new Map([ok("a"), ok("b"), ok("c"), down("d")]),
        }),
      ),
      { kind: "remove-member", name: "d", memberId: "4", reason: "dead" },
      "a learner whose pod failed is removed, not waited on",
    );
  },
);

t.test("quorum lost for good: rebuilt from the survivor that applied the most", async (t) => {
  const status = (name: string, applied: string): [string, EndpointStatus] => [
    name,
    { endpoint: `http://${name}:2379`, ok: true, leaderId: "0", raftAppliedIndex: applied },
  ];
  const three = [member("a", "1"), member("b", "2"), member("c", "3")];
  t.same(
    planNextStep(
      observation({ size: 3, pods: [pod("a")], members: three, health: new Map([status("a", "42")]) }),
    ),
    { kind: "recover-from-member", survivor: "a", appliedIndex: "42", lost: 2, voters: 3 },
  );
  const five = ["a", "b", "c", "d", "e"].map((n, i) => member(n, String(i + 1)));
  const step = planNextStep(
    observation({
      size: 5,
      pods: [pod("a"), pod("b")],
      members: five,
      health: new Map([status("a", "100"), status("b", "120")]),
    }),
  );
  t.match(step, { kind: "recover-from-member", survivor: "b", appliedIndex: "120", lost: 3, voters: 5 });
  // One of three gone: quorum holds, the member is simply replaced.
  t.match(
    planNextStep(
      observation({
        size: 3,
        pods: [pod("a"), pod("b")],
        members: three,
        health: new Map([status("a", "9"), status("b", "9")]),
      }),
    ),
    { kind: "remove-member", name: "c" },
  );
  // Pods that exist but do not answer could come back: no rebuild from a survivor.
  const stillThere = planNextStep(
    observation({
      size: 3,
      pods: [pod("a"), pod("b", { ready: false }), pod("c", { ready: false })],
      members: three,
      health: new Map([status("a", "9"), down("b"), down("c")]),
    }),
  );
  t.not(stillThere.kind, "recover-from-member", `pods still there: ${stillThere.kind}`);
});

t.test("a recovery in progress: seed, wait, finish, or give up", async (t) => {
  const mark = { survivor: "a", seed: "s", appliedIndex: "42", startedAtMs: NOW - 1000 };
  const members = [member("a", "1"), member("b", "2"), member("c", "3")];
  const base = { size: 3, members, recovery: mark };
  t.same(planNextStep(observation({ ...base, pods: [pod("a")], health: new Map([ok("a")]) })), {
    kind: "create-recovery-seed",
    seed: "s",
    survivorIp: pod("a").ip,
  });
  t.match(
    planNextStep(
      observation({ ...base, pods: [pod("a"), pod("s", { ready: false })], health: new Map([ok("a")]) }),
    ),
    { kind: "wait", reason: "RecoveringQuorum" },
  );
  t.same(
    planNextStep(observation({ ...base, pods: [pod("a"), pod("s")], health: new Map([ok("a"), ok("s")]) })),
    { kind: "finish-recovery", seed: "s", survivor: "a" },
  );
  t.match(planNextStep(observation({ ...base, pods: [], health: new Map() })), {
    kind: "abort-recovery",
    message: /gone before its data was copied/,
  });
  t.match(
    planNextStep(
      observation({
        ...base,
        recovery: { ...mark, startedAtMs: NOW - 11 * 60_000 },
        pods: [pod("a"), pod("s", { ready: false })],
        health: new Map([ok("a")]),
      }),
    ),
    { kind: "abort-recovery", message: /did not serve within/ },
  );
});

t.test("a downgrade: refused unless allowed, then etcd's procedure one member at a time", async (t) => {
  const members = [member("a", "1"), member("b", "2"), member("c", "3")];
  const o = (versions: string[], target: string, extra: Partial<Observation> = {}) =>
    observation({
      size: 3,
      pods: ["a", "b", "c"].map((n, i) => pod(n, { version: versions[i] })),
      members,
      health: new Map(
        ["a", "b", "c"].map((n, i) => [n, { endpoint: n, ok: true, leaderId: "1", version: versions[i] }]),
      ),
      spec: { ...spec(3), version: target },
      clusterVersion: "3.7.0",
      ...extra,
    });
  const all37 = ["3.7.3", "3.7.3", "3.7.3"];
  const refused = planNextStep(o(all37, "3.6.16"));
  t.equal(refused.kind, "version-refused");
  t.match(
    refused.kind === "version-refused" ? refused.message : "",
    /allow-downgrade="true"/,
    "says how to allow it",
  );
  t.same(planNextStep(o(all37, "3.6.16", { allowDowngrade: true })), {
    kind: "enable-downgrade",
    target: "3.6.16",
  });
  t.same(
    planNextStep(o(all37, "3.6.16", { allowDowngrade: true, clusterVersion: "3.6.0" })),
    { kind: "upgrade-member", name: "b", memberId: "2", from: "3.7.3", to: "3.6.16" },
    "once etcd lowered the cluster version: a follower first",
  );
  t.equal(
    planNextStep(
      o(["3.7.3", "3.6.16", "3.6.16"], "3.6.16", { allowDowngrade: true, clusterVersion: "3.6.0" }),
    ).kind,
    "move-leader",
    "the leader goes last, after handing leadership to a downgraded member",
  );
  const twoMinors = planNextStep(o(all37, "3.5.35", { allowDowngrade: true }));
  t.match(twoMinors, { kind: "version-refused", message: /one minor version at a time/ });
  const from35 = planNextStep(o(["3.5.35", "3.5.35", "3.5.35"], "3.4.0", { allowDowngrade: true }));
  t.equal(from35.kind, "version-refused", "3.5 has no supported downgrade");
});

t.test("persistent volumes: a member whose pod is gone comes back on its claim", async (t) => {
  const claim = (member: string, terminating = false) => ({ name: `${member}-pvc`, member, terminating });
  const claims = [claim("a"), claim("b"), claim("c")];
  const { members } = three();
  const health = new Map([ok("a"), ok("b")]);
  // Pod c is gone but its claim survives: same member, same name, no remove/add.
  t.same(planNextStep(observation({ size: 3, pods: [pod("a"), pod("b")], members, health, claims })), {
    kind: "restart-member",
    name: "c",
  });
  // Its old pod still terminates: wait, do not remove the member.
  t.equal(
    planNextStep(
      observation({
        size: 3,
        pods: [pod("a"), pod("b"), pod("c", { terminating: true })],
        members,
        health,
        claims,
      }),
    ).kind,
    "wait",
  );
  // The claim is going (deleted by hand): the member is replaced as without volumes.
  t.same(
    planNextStep(
      observation({
        size: 3,
        pods: [pod("a"), pod("b")],
        members,
        health,
        claims: [claim("a"), claim("b"), claim("c", true)],
      }),
    ),
    { kind: "remove-member", name: "c", memberId: "3", reason: "dead" },
  );
  // Every pod gone (etcd cannot answer): members come back from their claims, not "all lost".
  const lost = observation({
    size: 3,
    pods: [],
    members: undefined,
    hadMembers: true,
    claims,
    cluster: {
      metadata: { name: "c", namespace: "default", uid: "u" },
      status: { members: { ready: ["a", "b", "c"] } },
    } as Observation["cluster"],
  });
  t.same(planNextStep(lost), { kind: "restart-member", name: "a" });
  t.same(planNextStep({ ...lost, pods: [pod("a", { ready: false })] }), {
    kind: "restart-member",
    name: "b",
  });
  t.same(planNextStep({ ...lost, claims: [] }), { kind: "all-members-lost" });
});

t.test("persistent volumes: the claim of a member that is no more is deleted", async (t) => {
  const { pods, members } = three();
  const health = new Map([ok("a"), ok("b"), ok("c")]);
  const claims = ["a", "b", "c", "gone"].map((m) => ({ name: `${m}-pvc`, member: m, terminating: false }));
  t.same(planNextStep(observation({ size: 3, pods, members, health, claims })), {
    kind: "delete-claim",
    name: "gone-pvc",
    member: "gone",
  });
  // Without orphans, nothing to do.
  t.same(planNextStep(observation({ size: 3, pods, members, health, claims: claims.slice(0, 3) })), {
    kind: "steady",
  });
});

t.test("a status is the same whatever its key order and condition timestamps", async (t) => {
  // As the API server returns it: keys sorted.
  const paused = {
    lastTransitionTime: "2026-01-01T00:00:00Z",
    lastUpdateTime: "2026-01-01T00:00:00Z",
    message: "spec.paused is true",
    observedGeneration: 2,
    reason: "Paused",
    status: "False" as const,
    type: "Progressing",
  };
  const stored = {
    conditions: [paused],
    controlPaused: true,
    observedGeneration: 2,
    phase: "Running" as const,
  };
  // As reconcile builds it: code order, new timestamps, an undefined field.
  const built = {
    phase: "Running" as const,
    controlPaused: true,
    currentVersion: undefined,
    conditions: [
      {
        type: "Progressing",
        status: "False" as const,
        reason: "Paused",
        message: "spec.paused is true",
        observedGeneration: 2,
        lastTransitionTime: "2026-02-02T00:00:00Z",
        lastUpdateTime: "2026-02-02T00:00:00Z",
      },
    ],
    observedGeneration: 2,
  };
  t.ok(sameStatus(stored, built), "no write for an unchanged status");
  t.notOk(sameStatus(stored, { ...built, controlPaused: false }), "a changed field is a change");
  const condition = { ...paused, reason: "Scaling" };
  t.notOk(sameStatus(stored, { ...built, conditions: [condition] }), "a changed condition is a change");
});

const MIB = 1024 * 1024;

/** A member's Status with its database sizes (and alarms). */
function sized(name: string, leaderId: string, dbMiB: number, inUseMiB: number, errors: string[] = []) {
  const [key, status] = ok(name, leaderId);
  return [key, { ...status, dbSize: dbMiB * MIB, dbSizeInUse: inUseMiB * MIB, errors }] as [
    string,
    EndpointStatus,
  ];
}

t.test("NOSPACE: the space is recovered once a majority answers, before anything else", async (t) => {
  const alarm = ["memberID:2  alarm:NOSPACE"];
  const world = three();
  t.same(
    planNextStep(
      observation({
        size: 3,
        ...world,
        health: new Map([sized("a", "1", 20, 19), sized("b", "1", 20, 19, alarm), sized("c", "1", 20, 19)]),
      }),
    ),
    { kind: "recover-space", members: ["b"] },
    "one member's alarm is the cluster's: writes are refused everywhere",
  );
  t.same(
    planNextStep(
      observation({
        size: 5,
        ...world,
        health: new Map([sized("a", "1", 20, 19, alarm), ok("b"), ok("c")]),
      }),
    ).kind,
    "recover-space",
    "before a missing member is added (adding needs no space, but writes come first)",
  );
  const lost = planNextStep(
    observation({
      size: 3,
      ...world,
      pods: [pod("a"), pod("b", { ready: false, notReadyForMs: 1_000 }), pod("c", { ready: false })],
      health: new Map([sized("a", "1", 20, 19, alarm), down("b"), down("c")]),
    }),
  );
  t.not(lost.kind, "recover-space", "not without a majority: compaction and the disarm need a quorum");
  const withRevision = (rev: string): [string, EndpointStatus][] =>
    [sized("a", "1", 16, 15, alarm), sized("b", "1", 16, 15), sized("c", "1", 16, 15)].map(([k, s]) => [
      k,
      { ...s, revision: rev },
    ]);
  const stillFull = {
    ...observation({ size: 3 }).cluster,
    status: {
      lastSpaceRecovery: {
        revision: "500",
        finishedAt: new Date(NOW).toISOString(),
        result: "StillFull" as const,
      },
    },
  };
  t.match(
    planNextStep(
      observation({ size: 3, ...world, cluster: stillFull, health: new Map(withRevision("500")) }),
    ),
    { kind: "wait", reason: "NoSpace" },
    "the live data filled the quota at the last try and nothing changed since: no new round of defragmentations",
  );
  t.same(
    planNextStep(observation({ size: 3, ...world, cluster: stillFull, health: new Map(withRevision("731")) }))
      .kind,
    "recover-space",
    "keys deleted since (a newer revision): tried again",
  );
});

t.test("defragmentation: over the threshold, followers first, the leader last as a follower", async (t) => {
  const world = three();
  const o = (health: [string, EndpointStatus][], extra: Partial<Observation> = {}) =>
    planNextStep(observation({ size: 3, ...world, health: new Map(health), ...extra }));
  t.same(
    o([sized("a", "1", 200, 20), sized("b", "1", 200, 150), sized("c", "1", 300, 30)]),
    { kind: "defragment-member", name: "c", memberId: "3", dbSize: 300 * MIB, fragmentedPercent: 90 },
    "the most fragmented follower first; b (25% free) is under the default 50%",
  );
  t.same(
    o([sized("a", "1", 200, 20), sized("b", "1", 200, 150), sized("c", "1", 30, 29)]),
    {
      kind: "move-leader",
      fromId: "1",
      toId: "3",
      toName: "c",
      reason: "the leader is defragmented last, as a follower",
    },
    "only the leader is due: leadership goes to the least fragmented follower first",
  );
  t.same(
    o([sized("a", "1", 60, 1), sized("b", "1", 63, 1), sized("c", "1", 10, 1)]).kind,
    "steady",
    "files under the 64 MiB minimum are left alone",
  );
  const disabled = {
    ...spec(3),
    maintenance: { defragmentation: { enabled: false, thresholdPercent: 50, minimumBytes: 0 } },
  };
  t.same(
    o([sized("a", "1", 200, 20), sized("b", "1", 200, 20), sized("c", "1", 200, 20)], { spec: disabled })
      .kind,
    "steady",
    "off when disabled",
  );
  const custom = {
    ...spec(3),
    maintenance: { defragmentation: { enabled: true, thresholdPercent: 20, minimumBytes: MIB } },
  };
  t.same(
    o([sized("a", "1", 10, 9), sized("b", "1", 10, 7), sized("c", "1", 10, 9)], { spec: custom }),
    { kind: "defragment-member", name: "b", memberId: "2", dbSize: 10 * MIB, fragmentedPercent: 30 },
    "the cluster's own threshold and minimum",
  );
  const recently = {
    ...observation({ size: 3 }).cluster,
    status: {
      lastDefragmentation: {
        member: "c",
        finishedAt: new Date(NOW - DEFRAG_COOLDOWN_MS / 2).toISOString(),
        durationSeconds: 1,
        dbSizeBefore: 300 * MIB,
        dbSizeAfter: 300 * MIB,
      },
    },
  };
  t.same(
    o([sized("a", "1", 30, 29), sized("b", "1", 30, 29), sized("c", "1", 300, 30)], { cluster: recently })
      .kind,
    "steady",
    "a member defragmented within the cool-down is not done again",
  );
  t.same(
    o([sized("a", "1", 200, 20), sized("b", "1", 200, 20), sized("c", "1", 200, 20)], {
      pods: [pod("a"), pod("b"), pod("c", { ready: false })],
      health: new Map([sized("a", "1", 200, 20), sized("b", "1", 200, 20), down("c")]),
    }).kind,
    "wait",
    "never while a voter is unhealthy",
  );
  t.same(
    planNextStep(
      observation({
        size: 4,
        ...world,
        health: new Map([sized("a", "1", 200, 20), sized("b", "1", 200, 20), sized("c", "1", 200, 20)]),
      }),
    ).kind,
    "add-member",
    "not while the cluster is short of a member",
  );
});

t.test(
  "a defragmentation schedule: every member once per time, leader last, new members left out",
  async (t) => {
    const world = three();
    // NOW is 1970-01-12T13:46:40Z, the pods were created at 13:36:40; the schedule's latest time is 13:40.
    const scheduledAt = Date.UTC(1970, 0, 12, 13, 40);
    const withSchedule = {
      ...spec(3),
      maintenance: {
        defragmentation: { enabled: false, thresholdPercent: 50, minimumBytes: 0, schedule: "40 13 * * *" },
      },
    };
    const compact = (): [string, EndpointStatus][] => [
      sized("a", "1", 10, 10),
      sized("b", "1", 10, 10),
      sized("c", "1", 10, 10),
    ];
    const planWith = (done: Record<string, string>, extra: Partial<Observation> = {}) =>
      planNextStep(
        observation({
          size: 3,
          ...world,
          spec: withSchedule,
          health: new Map(compact()),
          cluster: { ...observation({ size: 3 }).cluster, status: { memberDefragmentations: done } },
          ...extra,
        }),
      );
    t.match(
      planWith({}),
      { kind: "defragment-member", name: "b" },
      "a follower first, though nothing is fragmented",
    );
    const before = new Date(scheduledAt - 60_000).toISOString();
    const after = new Date(scheduledAt + 60_000).toISOString();
    t.match(
      planWith({ a: before, b: after }),
      { kind: "defragment-member", name: "c" },
      "then the other follower",
    );
    t.match(
      planWith({ a: before, b: after, c: after }),
      { kind: "move-leader", fromId: "1" },
      "then leadership moves",
    );
    t.same(planWith({ a: after, b: after, c: after }).kind, "steady", "all done since the schedule's time");
    t.same(
      planWith(
        {},
        {
          pods: [
            pod("a", { createdAtMs: scheduledAt + 1 }),
            pod("b", { createdAtMs: scheduledAt + 1 }),
            pod("c", { createdAtMs: scheduledAt + 1 }),
          ],
        },
      ).kind,
      "steady",
      "members created after the schedule's time are left out",
    );
  },
);

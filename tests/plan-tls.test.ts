// Unit tests of the planner's certificate rotation (spec.TLS Secrets changed): members on old
// certificates are replaced one at a time, add first, followers before the leader, and only while
// every voter is healthy.
import t from "tap";
import { type Observation, type PodView, planNextStep, type Step } from "../functions/plan.ts";
import { normalizedMaintenance } from "../shared/api/validate-etcd-cluster.ts";
import type { EndpointStatus, MemberInfo } from "../shared/etcd-members.ts";

const NOW = 1_000_000_000;
const OLD = "old-hash";
const NEW = "new-hash";

function pod(name: string, tlsHash: string, extra: Partial<PodView> = {}): PodView {
  return {
    name,
    ip: `10.0.0.${name.charCodeAt(0)}`,
    phase: "Running",
    ready: true,
    terminating: false,
    createdAtMs: NOW - 600_000,
    version: "3.7.3",
    tlsHash,
    ...extra,
  };
}

function member(name: string, id: string, extra: Partial<MemberInfo> = {}): MemberInfo {
  return {
    id,
    name,
    peerURLs: [`https://${name}.c.default.svc:2380`],
    clientURLs: [],
    isLearner: false,
    ...extra,
  };
}

function ok(leaderId: string): EndpointStatus {
  return { endpoint: "e", ok: true, leaderId, version: "3.7.3" };
}

interface World {
  size: number;
  /** name → [id, tls hash] */
  members: Record<string, [string, string]>;
  leader: string;
  learners?: string[];
  down?: string[];
}

function observe(world: World): Observation {
  const names = Object.keys(world.members);
  return {
    nowMs: NOW,
    cluster: { metadata: { name: "c", namespace: "default", uid: "u" } } as Observation["cluster"],
    spec: {
      size: world.size,
      repository: "r",
      version: "3.7.3",
      paused: false,
      pod: {},
      maintenance: normalizedMaintenance(undefined),
    },
    pods: names.map((n) => pod(n, world.members[n]?.[1] ?? "", { ready: !world.down?.includes(n) })),
    services: { peer: true, client: true },
    members: names.map((n) =>
      member(n, world.members[n]?.[0] ?? "", { isLearner: world.learners?.includes(n) }),
    ),
    health: new Map(
      names.map((n): [string, EndpointStatus] =>
        world.down?.includes(n) ? [n, { endpoint: "e", ok: false }] : [n, ok(world.leader)],
      ),
    ),
    hadMembers: true,
    clusterVersion: "3.7.0",
    tls: { hash: NEW },
  };
}

t.test("no rotation while every member runs the current certificates", async (t) => {
  const step = planNextStep(
    observe({ size: 3, leader: "1", members: { a: ["1", NEW], b: ["2", NEW], c: ["3", NEW] } }),
  );
  t.same(step, { kind: "steady" });
});

t.test("a cluster without TLS never rotates", async (t) => {
  const o = observe({ size: 3, leader: "1", members: { a: ["1", OLD], b: ["2", OLD], c: ["3", OLD] } });
  t.same(planNextStep({ ...o, tls: undefined }), { kind: "steady" });
});

t.test("changed certificates: a member with the new ones is added first", async (t) => {
  const step = planNextStep(
    observe({ size: 3, leader: "1", members: { a: ["1", OLD], b: ["2", OLD], c: ["3", OLD] } }),
  );
  t.same(step, { kind: "add-member", reason: "tls-rotation" });
});

t.test(
  "with one voter too many, a follower on the old certificates goes, never the leader first",
  async (t) => {
    const step = planNextStep(
      observe({
        size: 3,
        leader: "1",
        members: { a: ["1", OLD], b: ["2", OLD], c: ["3", OLD], d: ["4", NEW] },
      }),
    );
    t.equal(step.kind, "remove-member");
    if (step.kind === "remove-member") {
      t.not(step.memberId, "1", "not the leader");
      t.equal(step.reason, "tls-rotation");
    }
  },
);

t.test(
  "when only the leader is left on old certificates, leadership moves to a new member first",
  async (t) => {
    const step = planNextStep(
      observe({
        size: 3,
        leader: "1",
        members: { a: ["1", OLD], d: ["4", NEW], e: ["5", NEW], f: ["6", NEW] },
      }),
    );
    t.match(step, { kind: "move-leader", fromId: "1" });
    if (step.kind === "move-leader") t.ok(["4", "5", "6"].includes(step.toId));
  },
);

t.test("a learner with the new certificates is promoted before anything is removed", async (t) => {
  const step = planNextStep(
    observe({
      size: 3,
      leader: "1",
      members: { a: ["1", OLD], b: ["2", OLD], c: ["3", OLD], d: ["4", NEW] },
      learners: ["d"],
    }),
  );
  t.match(step, { kind: "promote-member", memberId: "4" });
});

t.test("nothing is rotated while a voter is unhealthy", async (t) => {
  const step = planNextStep(
    observe({ size: 3, leader: "1", members: { a: ["1", OLD], b: ["2", OLD], c: ["3", OLD] }, down: ["c"] }),
  );
  t.equal(step.kind, "wait");
});

t.test(
  "a whole rotation, simulated: never below quorum, one member at a time, the leader last",
  async (t) => {
    for (const size of [1, 3, 5]) {
      const world: World = { size, leader: "1", members: {} };
      for (let i = 1; i <= size; i++) world.members[`m${i}`] = [String(i), OLD];
      let next = size + 1;
      const removedOrder: string[] = [];
      for (let round = 0; round < 10 * size; round++) {
        const step: Step = planNextStep(observe(world));
        if (step.kind === "steady") break;
        const voters = Object.keys(world.members).filter((n) => !world.learners?.includes(n));
        if (step.kind === "add-member") {
          const name = `m${next}`;
          world.members[name] = [String(next++), NEW];
          world.learners = [...(world.learners ?? []), name];
        } else if (step.kind === "promote-member") {
          world.learners = world.learners?.filter((n) => n !== step.name);
        } else if (step.kind === "remove-member") {
          t.ok(voters.length - 1 >= size, `size ${size}: a removal never leaves fewer than ${size} voters`);
          t.not(step.memberId, world.leader, "the leader is never removed while leading");
          removedOrder.push(step.memberId);
          delete world.members[step.name];
        } else if (step.kind === "move-leader") {
          world.leader = step.toId;
        } else {
          t.fail(`unexpected step ${step.kind}`);
          break;
        }
        t.ok(Object.keys(world.members).length <= size + 1, "at most one extra member at a time");
      }
      t.same(
        Object.values(world.members).map(([, hash]) => hash),
        Array(size).fill(NEW),
        `size ${size}: every member ends on the new certificates`,
      );
      t.equal(removedOrder.at(-1), "1", `size ${size}: the first leader is replaced last`);
    }
  },
);

t.test("with client TLS too, a quorum lost for good is rebuilt from the survivor", async (t) => {
  const base = observe({ size: 3, leader: "1", members: { a: ["1", NEW] } });
  const lost: Observation = {
    ...base,
    members: undefined,
    localMembers: [member("a", "1"), member("b", "2"), member("c", "3")],
    health: new Map([["a", { endpoint: "e", ok: true, leaderId: "0", raftAppliedIndex: "10" }]]),
    spec: { ...base.spec, TLS: { static: { member: { serverSecret: "s" }, operatorSecret: "o" } } },
  };
  t.match(planNextStep(lost), { kind: "recover-from-member", survivor: "a" });
});

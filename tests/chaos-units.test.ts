// Chaos mode's rules without a cluster: who is eligible, the level's odds, the victim spread, and
// the configuration.
import type { V1Pod } from "@kubernetes/client-node";
import t from "tap";
import { chaosDecision, MAX_CHAOS_LEVEL } from "../functions/chaos.ts";
import {
  CHAOS_ANNOTATION,
  type EtcdCluster,
  RECOVERY_ANNOTATION,
  RESTORE_ANNOTATION,
} from "../shared/api/etcd-cluster.ts";
import { ConfigError, loadConfig } from "../shared/config.ts";

function pod(name: string, ready = true, deleting = false): V1Pod {
  return {
    metadata: { name, deletionTimestamp: deleting ? new Date() : undefined },
    status: { conditions: [{ type: "Ready", status: ready ? "True" : "False" }] },
  };
}

function cluster(
  options: {
    size?: number;
    annotations?: Record<string, string>;
    available?: boolean;
    progressing?: boolean;
    ready?: number;
    paused?: boolean;
  } = {},
): EtcdCluster {
  const size = options.size ?? 3;
  return {
    apiVersion: "etcd.database.coreos.com/v1beta2",
    kind: "EtcdCluster",
    metadata: {
      name: "c",
      namespace: "default",
      annotations: options.annotations ?? { [CHAOS_ANNOTATION]: "true" },
    },
    spec: { size, paused: options.paused },
    status: {
      readyMembers: options.ready ?? size,
      conditions: [
        { type: "Available", status: options.available === false ? "False" : "True" },
        { type: "Progressing", status: options.progressing ? "True" : "False" },
      ],
    },
  } as EtcdCluster;
}

const three = [pod("c-a"), pod("c-b"), pod("c-c")];

t.test("only an opted-in, whole and healthy cluster of 3 or more is touched", async (t) => {
  t.same(chaosDecision(cluster(), three, 10, 0, 0), { kill: "c-a" });
  t.same(chaosDecision(cluster({ annotations: {} }), three, 10, 0, 0), { skip: "not opted in" });
  t.same(chaosDecision(cluster({ annotations: { [CHAOS_ANNOTATION]: "yes" } }), three, 10, 0, 0), {
    skip: "not opted in",
  });
  t.same(chaosDecision(cluster(), three, 0, 0, 0), { skip: "chaos is off" });
  t.same(chaosDecision(cluster({ paused: true }), three, 10, 0, 0), { skip: "paused" });
  for (const mark of [RESTORE_ANNOTATION, RECOVERY_ANNOTATION]) {
    t.same(
      chaosDecision(cluster({ annotations: { [CHAOS_ANNOTATION]: "true", [mark]: "x" } }), three, 10, 0, 0),
      { skip: "being rebuilt" },
      mark,
    );
  }
  t.same(chaosDecision(cluster({ available: false }), three, 10, 0, 0), { skip: "not steady and available" });
  t.same(chaosDecision(cluster({ progressing: true }), three, 10, 0, 0), {
    skip: "not steady and available",
  });
  t.same(chaosDecision(cluster({ ready: 2 }), three, 10, 0, 0), { skip: "2 of 3 members ready" });
  // The status can lag behind the pods: a member already down (deleted, not Ready, missing) blocks it.
  t.same(chaosDecision(cluster(), [pod("c-a"), pod("c-b"), pod("c-c", false)], 10, 0, 0), {
    skip: "member pods not all up and Ready",
  });
  t.same(chaosDecision(cluster(), [pod("c-a"), pod("c-b"), pod("c-c", true, true)], 10, 0, 0), {
    skip: "member pods not all up and Ready",
  });
  t.same(chaosDecision(cluster(), [pod("c-a"), pod("c-b")], 10, 0, 0), {
    skip: "member pods not all up and Ready",
  });
  t.same(chaosDecision(cluster({ size: 1 }), [pod("c-a")], 10, 0, 0), { skip: "fewer than 3 members" });
});

t.test("level N kills with probability N/10 per look, any member alike", async (t) => {
  t.equal(MAX_CHAOS_LEVEL, 10);
  for (const level of [1, 5, 10]) {
    let kills = 0;
    for (let i = 0; i < 1000; i++) if ("kill" in chaosDecision(cluster(), three, level, i / 1000, 0)) kills++;
    t.equal(kills, level * 100, `level ${level}: ${kills} of 1000 looks`);
  }
  const victims = new Set<string>();
  for (let i = 0; i < 30; i++) {
    const decision = chaosDecision(cluster(), three, 10, 0, i / 30);
    if ("kill" in decision) victims.add(decision.kill);
  }
  t.same([...victims].sort(), ["c-a", "c-b", "c-c"], "every member can be chosen");
});

t.test("CHAOS_LEVEL and CHAOS_INTERVAL_MS", async (t) => {
  const config = loadConfig({});
  t.equal(config.chaosLevel, 0, "off by default");
  t.equal(config.chaosIntervalMs, 30_000, "every 30 s, as coreos's level 1");
  t.equal(loadConfig({ CHAOS_LEVEL: "3", CHAOS_INTERVAL_MS: "5000" }).chaosLevel, 3);
  t.throws(() => loadConfig({ CHAOS_LEVEL: "11" }), ConfigError);
  t.throws(() => loadConfig({ CHAOS_LEVEL: "-1" }), /CHAOS_LEVEL must be a whole number from 0 to 10/);
  t.throws(() => loadConfig({ CHAOS_INTERVAL_MS: "10" }), /CHAOS_INTERVAL_MS/);
});

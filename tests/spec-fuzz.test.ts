// Fuzz: hostile EtcdCluster, EtcdBackup and EtcdRestore objects generated from a seed (wrong types,
// huge and negative numbers, strings far over any limit, shell metacharacters with a marker command
// in every string field, newlines, names of 253 and 254 characters, conflicting fields), applied to
// the real API server with the operator running and a healthy cluster beside them. Each must be
// refused with a 4xx and a message, or, when the API server accepts it, reported clearly by the
// operator (an InvalidSpec condition and Event, a failed backup or restore with a reason), without
// the worker ever crashing. The running cluster keeps its pods and stays Available (the restores
// all name it and must fail before touching it), and no string ever reaches a shell: the marker file
// `/tmp/chaos-pwned-<seed>` must never appear, and no shell script the operator puts in a pod
// contains a user's string. SPEC_FUZZ_SEED replays a run, SPEC_FUZZ_COUNT sets how many per kind.
import { existsSync, readFileSync, rmSync } from "node:fs";
import { CustomObjectsApi } from "@kubernetes/client-node";
import t from "tap";
import { installCrds } from "../infra/crds.ts";
import { startLocalCluster } from "../infra/local/control-plane.ts";
import { clientsFor, waitFor } from "../infra/local/kube-wait.ts";
import { BACKUP_PLURAL } from "../shared/api/etcd-backup.ts";
import { GROUP, PLURAL, VERSION } from "../shared/api/etcd-cluster.ts";
import { RESTORE_PLURAL } from "../shared/api/etcd-restore.ts";
import { validateEtcdClusterSpec } from "../shared/api/validate-etcd-cluster.ts";
import { Kube } from "../shared/kube.ts";
import { memberPod, newMemberName, peerURL } from "../shared/member-pods.ts";
import { restoreSeedPod } from "../shared/restore-pods.ts";
import { awsSecretData, createSecret, deleteCustom, eventsOf } from "./helpers/backups.ts";
import { livePods } from "./helpers/chaos.ts";
import { type ClusterClients, createCluster, getCluster, waitReady } from "./helpers/clusters.ts";
import { type HostileObject, hostileObject, type Kind, shellPayloads } from "./helpers/hostile-specs.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { chooser, seedFrom } from "./helpers/random.ts";

const SEED = seedFrom(process.env.SPEC_FUZZ_SEED);
const COUNT = Number(process.env.SPEC_FUZZ_COUNT ?? 60);
const MARKER = `/tmp/chaos-pwned-${SEED}`;
const NS = "default";
t.comment(`SPEC_FUZZ_SEED=${SEED} SPEC_FUZZ_COUNT=${COUNT} marker ${MARKER}`);
rmSync(MARKER, { force: true });

const PLURALS: Record<Kind, string> = {
  EtcdCluster: PLURAL,
  EtcdBackup: BACKUP_PLURAL,
  EtcdRestore: RESTORE_PLURAL,
};
const SHELLS = /(^|\/)(sh|bash|dash|ash|zsh)$/;

/** The scripts of containers that run a shell with -c (their only shell code). */
function shellScripts(pod: { spec?: { containers: unknown[]; initContainers?: unknown[] } }): string[] {
  const containers = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])] as {
    command?: string[];
    args?: string[];
  }[];
  return containers.flatMap((c) => {
    const argv = [...(c.command ?? []), ...(c.args ?? [])];
    const dashC = argv.indexOf("-c");
    return SHELLS.test(argv[0] ?? "") && dashC > 0 ? [argv[dashC + 1] ?? ""] : [];
  });
}

t.test(
  `no user string is ever spliced into a shell script of a member or restore pod (SPEC_FUZZ_SEED=${SEED})`,
  async (t) => {
    const rand = chooser(SEED);
    let built = 0;
    const scripts = new Set<string>();
    for (let i = 0; i < COUNT * 5; i++) {
      const hostile = hostileObject(rand, "EtcdCluster", i, MARKER);
      const validation = validateEtcdClusterSpec(hostile.body.spec);
      if (!validation.ok) continue;
      const cluster = {
        ...(hostile.body as object),
        metadata: { name: "fz", namespace: NS, uid: "u" },
      } as Parameters<typeof memberPod>[0]["cluster"];
      const name = newMemberName("fz");
      const url = peerURL(name, "fz", NS, validation.spec.pod.ClusterDomain);
      const pod = memberPod({
        cluster,
        spec: validation.spec,
        name,
        initialCluster: [{ name, peerURL: url }],
        state: "new",
      });
      const payload = rand.pick(shellPayloads(MARKER));
      const seed = restoreSeedPod({
        pod,
        source: {
          storageType: "S3",
          section: { path: `bucket/${payload}`, awsSecret: payload, endpoint: payload },
          sha256: payload,
        },
        operatorImage: "op",
        etcdImage: "etcd",
        memberName: name,
        peerURL: url,
        clusterToken: payload,
      });
      for (const script of [...shellScripts(pod), ...shellScripts(seed)]) scripts.add(script);
      built++;
    }
    t.ok(built > 0, `${built} accepted hostile specs built into member and restore pods`);
    t.ok(scripts.size > 0, `${scripts.size} distinct shell script(s) in them`);
    for (const script of scripts)
      t.notMatch(script, /chaos-pwned/, "a shell script with no user string in it");
  },
);

const local = await startLocalCluster({ name: "e2e-specfuzz" });
t.teardown(() => local.stop());
const { kc, core } = clientsFor(local.kubeconfigPath);
const custom = kc.makeApiClient(CustomObjectsApi);
const c: ClusterClients = { kube: new Kube(kc), core, custom };
await installCrds(kc);
const operator: OperatorProcess = startOperatorProcess(local, "all", { LOG_LEVEL: "info" });
t.teardown(() => operator.kill("SIGKILL"));

/** The API server's answer to a create: undefined when accepted, else its status code and message. */
async function apply(object: HostileObject): Promise<{ code: number; message: string } | undefined> {
  try {
    await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURALS[object.kind],
      body: object.body,
    });
    return undefined;
  } catch (error) {
    const code = typeof error === "object" && error && "code" in error ? Number(error.code) : 0;
    const body = typeof error === "object" && error && "body" in error ? String(error.body) : "";
    let message = "";
    try {
      message = (JSON.parse(body) as { message?: string }).message ?? "";
    } catch {
      message = body;
    }
    return { code, message };
  }
}

t.test(
  `hostile specs are refused or reported, and the running cluster is untouched (SPEC_FUZZ_SEED=${SEED})`,
  async (t) => {
    // Credentials that exist (and are wrong), so hostile backups and restores get past the Secret.
    await createSecret(
      c,
      NS,
      "aws",
      awsSecretData({ accessKeyId: "AKIAFUZZ", secretAccessKey: "x", region: "us-east-1" }),
    );
    await createCluster(c, NS, "steady", { size: 1 });
    await waitReady(c, NS, "steady", 1);
    const steadyPods = (await livePods({ c, namespace: NS, name: "steady" }))
      .map((p) => p.metadata?.uid)
      .sort();
    const rand = chooser(SEED + 1);
    const accepted: HostileObject[] = [];
    const refusedBy = new Map<number, number>();
    for (const kind of ["EtcdCluster", "EtcdBackup"] as const) {
      for (let i = 0; i < COUNT; i++) {
        const object = hostileObject(rand, kind, i, MARKER);
        // Most accepted clusters stay paused (validated and reported, no pods) to spare the machine.
        const spec = object.body.spec;
        if (
          kind === "EtcdCluster" &&
          rand.chance(0.7) &&
          typeof spec === "object" &&
          spec &&
          !Array.isArray(spec)
        ) {
          (spec as Record<string, unknown>).paused = true;
        }
        const refused = await apply(object);
        if (!refused) {
          accepted.push(object);
          continue;
        }
        refusedBy.set(refused.code, (refusedBy.get(refused.code) ?? 0) + 1);
        if (!(refused.code >= 400 && refused.code < 500 && refused.message.length > 0)) {
          t.fail(
            `${kind} (${object.mutations.join("; ")}): refused with ${refused.code} "${refused.message}"`,
          );
        }
      }
    }
    t.comment(`refused: ${JSON.stringify(Object.fromEntries(refusedBy))}; accepted: ${accepted.length}`);
    t.ok(refusedBy.size > 0, "the API server refused some with 4xx and a message");

    // Every accepted object gets an answer from the operator.
    const reported = new Map<string, string>();
    const stored = new Map<string, unknown>();
    await waitFor(
      `a report on each of the ${accepted.length} accepted objects`,
      async () => {
        for (const object of accepted) {
          const key = `${object.kind}/${object.name}`;
          if (reported.has(key)) continue;
          if (object.kind === "EtcdCluster") {
            const found = await c.kube.getCluster(NS, object.name);
            const degraded = found?.status?.conditions?.find((x) => x.type === "Degraded");
            if (degraded?.status === "True" && degraded.reason === "InvalidSpec" && degraded.message) {
              reported.set(key, `InvalidSpec: ${degraded.message}`);
            } else if (found?.status?.controlPaused || found?.status?.phase) {
              reported.set(
                key,
                `taken as valid (${found.status.controlPaused ? "paused" : found.status.phase})`,
              );
              // As stored: the API server drops nulls and fills defaults.
              stored.set(key, found.spec);
            }
          } else {
            const found = await c.kube.getBackup(NS, object.name);
            if (found?.status?.succeeded === false && found.status.reason) {
              reported.set(key, `failed: ${found.status.reason}`);
            }
          }
        }
        return reported.size === accepted.length ? true : undefined;
      },
      {
        timeoutMs: 180_000,
        intervalMs: 1_000,
        describe: async () =>
          accepted
            .filter((o) => !reported.has(`${o.kind}/${o.name}`))
            .map((o) => `${o.kind}/${o.name}: ${o.mutations.join("; ")}`)
            .join(" | "),
      },
    );
    for (const object of accepted) {
      const key = `${object.kind}/${object.name}`;
      const report = reported.get(key) ?? "";
      if (report.startsWith("InvalidSpec")) {
        const events = await eventsOf(c, NS, "EtcdCluster", object.name);
        t.ok(
          events.some((e) => e.reason === "InvalidSpec" && e.type === "Warning"),
          `${key}: InvalidSpec condition and Event (${object.mutations.join("; ")})`,
        );
      } else if (report.startsWith("taken as valid")) {
        // Accepted and run: then the operator's own validator must agree that it is valid.
        t.ok(
          validateEtcdClusterSpec(stored.get(key)).ok,
          `${key}: ${report}, valid by the operator's rules too (${object.mutations.join("; ")})`,
        );
      } else {
        t.match(report, /^failed: \S/, `${key}: ${report}`);
      }
      await deleteCustom(c, NS, PLURALS[object.kind], object.name).catch(() => undefined);
    }

    // Restores must be named like their cluster: every one names the running cluster, one at a time.
    let restoresAccepted = 0;
    for (let i = 0; i < Math.ceil(COUNT / 4); i++) {
      const object = hostileObject(rand, "EtcdRestore", i, MARKER, "steady");
      const refused = await apply(object);
      if (refused) {
        t.ok(
          refused.code >= 400 && refused.code < 500 && refused.message.length > 0,
          `EtcdRestore (${object.mutations.join("; ")}): ${refused.code} ${refused.message.slice(0, 120)}`,
        );
        continue;
      }
      restoresAccepted++;
      const failed = await waitFor(
        `the hostile restore (${object.mutations.join("; ")}) to fail`,
        async () => {
          const restore = await c.kube.getRestore(NS, "steady");
          if (restore?.status?.phase === "Completed") throw new Error("a hostile restore completed");
          return restore?.status?.phase === "Failed" ? restore : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 300 },
      );
      t.match(failed.status?.reason, /\S/, `EtcdRestore failed: ${failed.status?.reason?.slice(0, 120)}`);
      await deleteCustom(c, NS, RESTORE_PLURAL, "steady");
      await waitFor("the restore to be gone", async () =>
        (await c.kube.getRestore(NS, "steady")) ? undefined : true,
      );
    }
    t.comment(
      `${restoresAccepted} hostile restores accepted by the API server, each failed before touching anything`,
    );

    const after = (await livePods({ c, namespace: NS, name: "steady" })).map((p) => p.metadata?.uid).sort();
    t.same(after, steadyPods, "the running cluster has the same pods");
    const steady = await getCluster(c, NS, "steady");
    t.equal(
      steady.status?.conditions?.find((x) => x.type === "Available")?.status,
      "True",
      "and is Available",
    );
    t.equal(operator.child.exitCode, null, "the operator never exited");
    t.equal(operator.child.signalCode, null, "nor was it killed");
    const fatal = readFileSync(operator.logFile, "utf8")
      .split("\n")
      .filter((line) => /"level":60|uncaught|unhandled/i.test(line));
    t.same(fatal, [], "no fatal or unhandled error in its log");
    t.notOk(existsSync(MARKER), `${MARKER} never appeared: no string reached a shell`);
  },
);

// The shell blocks the usage pages mark `<!-- runnable -->` run as a reader would run them: in page
// order (the order docs/usage/README.md lists the pages), with bash -euo pipefail, kubectl on the
// PATH, KUBECONFIG set and the current context's namespace one this test creates, against the
// local control plane with the operator and its S3 store. Each must exit 0 and, where its page
// shows what it prints, print that. First, without a cluster: the helper that finds the blocks,
// and that the pages mark what a reader most needs (create, scale, pause, back up, restore).
import { spawn } from "node:child_process";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import t from "tap";
import { ensureAssets } from "../infra/local/assets.ts";
import { waitFor } from "../infra/local/kube-wait.ts";
import { startClusterWithStore } from "./helpers/backups.ts";
import { lastSteps, type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";
import { outputMismatch, pageOrder, type RunnableBlock, runnableBlocks } from "./helpers/runnable-blocks.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const INDEX = "docs/usage/README.md";
/** The namespace the blocks run in, as a reader's current context would give it. */
const NS = "docs-examples";
const BUCKET = "etcd-backups";
/** One block may wait this long; the reader's own `--timeout`s are longer. */
const BLOCK_TIMEOUT_MS = 240_000;

function docsPages(): string[] {
  return readdirSync(join(ROOT, "docs"), { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".md"))
    .map((f) => join("docs", f));
}

/** Every runnable block of docs/, in the order a reader meets them. */
function documentedBlocks(): RunnableBlock[] {
  const order = pageOrder(INDEX, readFileSync(join(ROOT, INDEX), "utf8"), docsPages());
  return order.flatMap((page) => runnableBlocks(page, readFileSync(join(ROOT, page), "utf8")));
}

t.test("the helper finds the marked blocks only, in order, with their page and line", async (t) => {
  const page = [
    "# Title", //                                     1
    "", //                                            2
    "```sh", //                                       3
    "echo not marked", //                             4
    "```", //                                         5
    "<!-- runnable -->", //                           6
    "```sh", //                                       7
    "echo one", //                                    8
    "```", //                                         9
    "", //                                            10
    "<!-- output -->", //                             11
    "```text", //                                     12
    "one", //                                         13
    "```", //                                         14
    "````md", //                                      15
    "<!-- runnable -->", //                           16
    "```sh", //                                       17
    "echo shown inside another block", //            18
    "```", //                                         19
    "````", //                                        20
    "  <!-- runnable -->", //                         21
    "  ~~~bash", //                                   22
    "  echo two", //                                  23
    "  echo three", //                                24
    "  ~~~", //                                       25
  ].join("\n");
  const blocks = runnableBlocks("docs/x.md", page);
  t.same(
    blocks.map((b) => [b.page, b.line, b.language, b.code, b.expectedOutput]),
    [
      ["docs/x.md", 7, "sh", "echo one", "one"],
      ["docs/x.md", 22, "bash", "echo two\necho three", undefined],
    ],
  );
  t.throws(
    () => runnableBlocks("docs/y.md", "<!-- runnable -->\n\n```sh\necho\n```\n"),
    /docs\/y\.md:1: <!-- runnable --> must be followed by a fenced block/,
    "a mark must sit right before its fence",
  );
  t.throws(
    () =>
      runnableBlocks(
        "docs/z.md",
        "<!-- runnable -->\n```sh\necho a\n```\n```sh\necho b\n```\n<!-- output -->\n```text\na\n```\n",
      ),
    /docs\/z\.md:8: <!-- output --> follows no runnable block/,
    "an output belongs to the runnable block right before it",
  );
  t.same(runnableBlocks("docs/empty.md", "no blocks here\n"), []);
});

t.test("pages run in the order their index lists them, then the others by path", async (t) => {
  const index = "docs/usage/README.md";
  const text = "[b](b.md) then [a](a.md#part), [the API](../api.md), [b again](b.md), [gone](gone.md)";
  const pages = ["docs/api.md", "docs/usage/a.md", "docs/usage/b.md", "docs/install.md", index];
  t.same(pageOrder(index, text, pages), [
    "docs/usage/b.md",
    "docs/usage/a.md",
    "docs/api.md",
    "docs/install.md",
    "docs/usage/README.md",
  ]);
});

t.test("printed output is compared line by line, spaces loosely, `...` for any text", async (t) => {
  t.equal(outputMismatch("a  b\nc\n", "a b\nc"), undefined);
  t.equal(outputMismatch("\nNAME   AGE\nx      12s\n\n", "NAME AGE\nx ..."), undefined);
  t.match(outputMismatch("one\n", "one\ntwo"), /1 line\(s\) printed, the page shows 2/);
  t.match(outputMismatch("created\n", "configured"), /line 1 is "created", the page shows "configured"/);
  t.match(outputMismatch("a.b\n", "a*b"), /line 1/, "pattern characters are literal");
});

// What the blocks may use from the environment: the reader sets these (backups.md says so).
const READER_VARIABLES = [
  "S3_ENDPOINT",
  "S3_BUCKET",
  "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_REGION",
];

t.test("the usage pages mark what a reader most needs, as shell, with documented variables", async (t) => {
  const blocks = documentedBlocks();
  t.ok(blocks.length >= 8, `${blocks.length} runnable blocks`);
  for (const block of blocks) t.match(block.language, /^(sh|bash)$/, `${block.page}:${block.line} is shell`);
  const all = blocks.map((b) => b.code).join("\n");
  t.match(all, /kubectl wait --for=condition=Available etcdcluster\/example-etcd-cluster/, "create and wait");
  t.match(all, /kubectl scale etcdcluster example-etcd-cluster/, "scale");
  t.match(all, /"paused":true/, "pause");
  t.match(all, /kind: EtcdBackup[\s\S]*storageType: S3/, "a one-shot S3 backup");
  t.match(all, /kind: EtcdRestore/, "a restore");
  const backups = readFileSync(join(ROOT, "docs/usage/backups.md"), "utf8");
  const used = new Set([...all.matchAll(/\$\{?([A-Z][A-Z0-9_]*)/g)].map((m) => m[1] ?? ""));
  for (const name of used) {
    t.ok(READER_VARIABLES.includes(name), `$${name} is one the test sets`);
    t.ok(backups.includes(`\`${name}\``), `$${name} is documented in backups.md`);
  }
});

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** Runs a block with bash in its own process group, so a timeout also stops the kubectl it waits on. */
function runBlock(code: string, env: Record<string, string>): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-euo", "pipefail", "-c", code], {
      cwd: ROOT,
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    let timedOut = false;
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString("utf8");
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8");
    });
    const timer = setTimeout(() => {
      timedOut = true;
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    }, BLOCK_TIMEOUT_MS);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(new Error("bash could not start", { cause: error }));
    });
    child.on("close", (exitCode) => {
      clearTimeout(timer);
      resolve({ code: exitCode, stdout, stderr, timedOut });
    });
  });
}

t.test("every runnable block runs against a local cluster with the operator", async (t) => {
  const blocks = documentedBlocks();
  const { kubectl } = await ensureAssets({ only: ["kubernetes"], log: (line) => t.comment(line) });
  const { local, store, clients } = await startClusterWithStore(
    { name: "e2e-docs", bucket: BUCKET },
    (stop) => t.teardown(stop),
  );
  await clients.core.createNamespace({ body: { metadata: { name: NS } } });
  // Pods need the namespace's default ServiceAccount, which kube-controller-manager makes.
  await waitFor("the namespace's default ServiceAccount", async () =>
    (await clients.core.listNamespacedServiceAccount({ namespace: NS })).items.some(
      (sa) => sa.metadata?.name === "default",
    )
      ? true
      : undefined,
  );
  const operators: OperatorProcess[] = [startOperatorProcess(local, "all", { MY_POD_NAMESPACE: NS })];
  t.teardown(async () => {
    for (const p of operators) await p.kill("SIGKILL");
  });

  // What a reader has: kubectl on the PATH, a kubeconfig whose context names the namespace, a home.
  const scratch = mkdtempSync(join(tmpdir(), "docs-runnable-"));
  t.teardown(() => rmSync(scratch, { recursive: true, force: true }));
  const bin = join(scratch, "bin");
  const home = join(scratch, "home");
  for (const dir of [bin, home]) mkdirSync(dir);
  symlinkSync(kubectl, join(bin, "kubectl"));
  const kubeconfig = join(scratch, "kubeconfig");
  copyFileSync(local.kubeconfigPath, kubeconfig);
  const env: Record<string, string> = {
    PATH: `${bin}:${process.env.PATH ?? "/usr/bin:/bin"}`,
    HOME: home,
    KUBECONFIG: kubeconfig,
    S3_ENDPOINT: store.endpoint,
    S3_BUCKET: BUCKET,
    AWS_ACCESS_KEY_ID: store.accessKeyId,
    AWS_SECRET_ACCESS_KEY: store.secretAccessKey,
    AWS_REGION: store.region,
  };
  const setUp = await runBlock(`kubectl config set-context --current --namespace=${NS} >/dev/null`, env);
  t.equal(setUp.code, 0, `the kubeconfig's context names ${NS}${setUp.stderr ? `: ${setUp.stderr}` : ""}`);

  /** What a failed block leaves to look at: the objects, their Events, the operator's last steps. */
  const diagnose = async () => {
    const look = await runBlock(
      "kubectl get etcd,etcdbackup,etcdrestore,pods -o wide; kubectl get events --sort-by=.lastTimestamp | tail -n 25",
      env,
    );
    return `${look.stdout}${look.stderr}\noperator's last steps:\n${operators.map((p) => lastSteps(p, 8)).join("\n")}`;
  };

  const started = Date.now();
  let failed: string | undefined;
  for (const block of blocks) {
    const where = `${block.page}:${block.line}`;
    if (failed) {
      t.test(where, { skip: `after ${failed} failed` }, async () => {});
      continue;
    }
    await t.test(where, async (t) => {
      const blockStarted = Date.now();
      const outcome = await runBlock(block.code, env);
      const seconds = ((Date.now() - blockStarted) / 1000).toFixed(1);
      const ok = outcome.code === 0 && !outcome.timedOut;
      t.ok(
        ok,
        outcome.timedOut
          ? `still running after ${BLOCK_TIMEOUT_MS / 1000} s`
          : `exits ${outcome.code} in ${seconds} s${ok ? "" : `\nstdout:\n${outcome.stdout}\nstderr:\n${outcome.stderr}`}`,
      );
      if (ok && block.expectedOutput !== undefined) {
        const mismatch = outputMismatch(outcome.stdout, block.expectedOutput);
        t.equal(mismatch, undefined, "prints what the page shows");
        if (mismatch) failed = where;
      }
      if (!ok) failed = where;
      if (failed) t.comment(await diagnose());
    });
  }
  t.comment(`${blocks.length} blocks in ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

// Which `--role` values the real operator entry point accepts, asked of the CLI itself rather than
// read from its source: each candidate starts `node infra/operator.ts --role <role>` with an invalid
// REDIS_URL, so a known role gets past the role check and stops at the configuration ("REDIS_URL
// must ...") while an unknown one stops at "--role must be ...". Nothing connects anywhere.
import { spawn } from "node:child_process";

const ENTRY = new URL("../../infra/operator.ts", import.meta.url).pathname;
/** A role no version of the operator will have: proves the probe tells the two outcomes apart. */
const CONTROL = "no-such-role";

function startOutput(role: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [ENTRY, "--role", role], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", REDIS_URL: "not-a-redis-url" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      output += chunk.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    child.on("error", reject);
    child.on("close", () => {
      clearTimeout(timer);
      resolve(output);
    });
  });
}

function classify(role: string, output: string): boolean {
  if (output.includes("--role must be")) return false;
  if (output.includes("REDIS_URL")) return true;
  throw new Error(`could not tell whether the operator accepts --role ${role}; it printed:\n${output}`);
}

/** The subset of `candidates` the operator's CLI accepts as roles. */
export async function acceptedRoles(candidates: Iterable<string>): Promise<Set<string>> {
  const roles = [...new Set(candidates)];
  const outputs = await Promise.all([CONTROL, ...roles].map(startOutput));
  if (classify(CONTROL, outputs[0] ?? "")) {
    throw new Error(`the operator accepted the made-up role "${CONTROL}": the role probe no longer works`);
  }
  return new Set(roles.filter((role, i) => classify(role, outputs[i + 1] ?? "")));
}

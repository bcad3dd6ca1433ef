// Finds the real etcd process of a member pod on this machine, so a test can kill it as a
// crash would.
import { readdirSync, readFileSync } from "node:fs";

/** The pid of the etcd process running as member `name` (found by its --name flag). */
export function etcdPidOf(name: string): number | undefined {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (argv[0]?.endsWith("/etcd") && argv.includes(`--name=${name}`)) return Number(entry);
    } catch {
      // Gone while we looked.
    }
  }
  return undefined;
}

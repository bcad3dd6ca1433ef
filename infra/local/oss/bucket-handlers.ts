// Bucket-level operations: PutBucket, GetBucketInfo, GetBucketLocation, HEAD bucket, DeleteBucket,
// ListBuckets, ListObjects (v1: marker) and ListObjectsV2 (continuation-token), and
// ListMultipartUploads. Documents follow OSS's element names and order.
import { invalidArgument } from "./errors.ts";
import {
  type Exchange,
  integerParameter,
  locationOf,
  type OssBackend,
  readSmallBody,
  sendEmpty,
  sendXml,
} from "./exchange.ts";
import { listPage } from "./listing.ts";
import type { BucketRecord, StoredObject } from "./store.ts";
import { firstText, type XmlElement } from "./xml.ts";

const MAX_BUCKET_CONFIGURATION_BYTES = 64 * 1024;

function ownerElement(backend: OssBackend): XmlElement {
  return [
    "Owner",
    [
      ["ID", backend.owner.id],
      ["DisplayName", backend.owner.displayName],
    ],
  ];
}

const maxKeysParameter = (query: ReadonlyMap<string, string>, name: string) =>
  integerParameter(query, name, 100, 1, 1000, (value) =>
    invalidArgument(`Argument ${name} must be an integer between 1 and 1000.`, name, value),
  );

/** encoding-type=url asks for keys, prefixes and markers to be URL-encoded in the answer. */
function encoderFor(query: ReadonlyMap<string, string>): (text: string) => string {
  const encoding = query.get("encoding-type");
  if (encoding === undefined) return (text) => text;
  if (encoding !== "url") throw invalidArgument("The encoding-type must be url.", "encoding-type", encoding);
  return (text) => encodeURIComponent(text);
}

export async function putBucket(x: Exchange, backend: OssBackend): Promise<void> {
  const configuration = await readSmallBody(x.req, MAX_BUCKET_CONFIGURATION_BYTES);
  const storageClass = firstText(configuration, "StorageClass")?.trim() || "Standard";
  await backend.store.createBucket(x.bucket, storageClass);
  sendEmpty(x.res, 200, { location: `/${x.bucket}` });
}

function endpoints(backend: OssBackend): XmlElement[] {
  return [
    ["ExtranetEndpoint", `${locationOf(backend.region)}.aliyuncs.com`],
    ["IntranetEndpoint", `${locationOf(backend.region)}-internal.aliyuncs.com`],
  ];
}

export async function getBucketInfo(x: Exchange, backend: OssBackend): Promise<void> {
  const bucket = await backend.store.bucket(x.bucket);
  sendXml(x.res, 200, [
    "BucketInfo",
    [
      [
        "Bucket",
        [
          ["AccessMonitor", "Disabled"],
          ["CreationDate", bucket.creationDate],
          ...endpoints(backend),
          ["Location", locationOf(backend.region)],
          ["StorageClass", bucket.storageClass],
          ["TransferAcceleration", "Disabled"],
          ["CrossRegionReplication", "Disabled"],
          ["Name", bucket.name],
          ["ResourceGroupId", ""],
          ownerElement(backend),
          ["AccessControlList", [["Grant", "private"]]],
          ["DataRedundancyType", "LRS"],
        ],
      ],
    ],
  ]);
}

export async function getBucketLocation(x: Exchange, backend: OssBackend): Promise<void> {
  await backend.store.bucket(x.bucket);
  sendXml(x.res, 200, ["LocationConstraint", locationOf(backend.region)]);
}

export async function headBucket(x: Exchange, backend: OssBackend): Promise<void> {
  await backend.store.bucket(x.bucket);
  sendEmpty(x.res, 200, { "x-oss-bucket-region": locationOf(backend.region) });
}

export async function deleteBucket(x: Exchange, backend: OssBackend): Promise<void> {
  await backend.store.deleteBucket(x.bucket);
  sendEmpty(x.res, 204);
}

export async function listBuckets(x: Exchange, backend: OssBackend): Promise<void> {
  const prefix = x.query.get("prefix") ?? "";
  const marker = x.query.get("marker") ?? "";
  const maxKeys = maxKeysParameter(x.query, "max-keys");
  const named = (await backend.store.listBuckets()).map((bucket) => ({ key: bucket.name, bucket }));
  const page = listPage(named, { prefix, delimiter: "", after: marker, maxKeys });
  const bucketElement = ({ bucket }: { bucket: BucketRecord }): XmlElement => [
    "Bucket",
    [
      ["CreationDate", bucket.creationDate],
      ...endpoints(backend),
      ["Location", locationOf(backend.region)],
      ["Name", bucket.name],
      ["Region", backend.region],
      ["StorageClass", bucket.storageClass],
    ],
  ];
  sendXml(x.res, 200, [
    "ListAllMyBucketsResult",
    [
      ["Prefix", prefix],
      ["Marker", marker],
      ["MaxKeys", maxKeys],
      ["IsTruncated", page.truncated],
      ...(page.nextMarker === undefined ? [] : [["NextMarker", page.nextMarker] as const]),
      ownerElement(backend),
      ["Buckets", page.objects.map(bucketElement)],
    ],
  ]);
}

function contentsElement(
  object: StoredObject,
  encode: (text: string) => string,
  owner: XmlElement | undefined,
): XmlElement {
  return [
    "Contents",
    [
      ["Key", encode(object.key)],
      ["LastModified", object.lastModified],
      ["ETag", object.etag],
      ["Type", object.type],
      ["Size", object.size],
      ["StorageClass", "Standard"],
      ...(owner === undefined ? [] : [owner]),
    ],
  ];
}

/** GET / (ListObjects v1): prefix, marker, delimiter, max-keys, encoding-type. */
export async function listObjects(x: Exchange, backend: OssBackend): Promise<void> {
  const prefix = x.query.get("prefix") ?? "";
  const marker = x.query.get("marker") ?? "";
  const delimiter = x.query.get("delimiter") ?? "";
  const maxKeys = maxKeysParameter(x.query, "max-keys");
  const encode = encoderFor(x.query);
  await backend.store.bucket(x.bucket);
  const page = listPage(await backend.store.list(x.bucket), { prefix, delimiter, after: marker, maxKeys });
  const owner = ownerElement(backend);
  sendXml(x.res, 200, [
    "ListBucketResult",
    [
      ["Name", x.bucket],
      ["Prefix", encode(prefix)],
      ["Marker", encode(marker)],
      ["MaxKeys", maxKeys],
      ["Delimiter", encode(delimiter)],
      ...(x.query.has("encoding-type") ? [["EncodingType", "url"] as const] : []),
      ["IsTruncated", page.truncated],
      ...(page.nextMarker === undefined ? [] : [["NextMarker", encode(page.nextMarker)] as const]),
      ...page.objects.map((object) => contentsElement(object, encode, owner)),
      ...page.commonPrefixes.map((common): XmlElement => ["CommonPrefixes", [["Prefix", encode(common)]]]),
    ],
  ]);
}

/** Continuation tokens are opaque to clients; here they carry the last key of the previous page. */
const continuationToken = (after: string) => Buffer.from(after, "utf8").toString("base64url");

function afterContinuationToken(token: string): string {
  if (!/^[A-Za-z0-9_-]+$/.test(token)) {
    throw invalidArgument("The continuation token provided is incorrect.", "continuation-token", token);
  }
  return Buffer.from(token, "base64url").toString("utf8");
}

/** GET /?list-type=2 (ListObjectsV2): continuation-token, start-after, fetch-owner, ... */
export async function listObjectsV2(x: Exchange, backend: OssBackend): Promise<void> {
  const prefix = x.query.get("prefix") ?? "";
  const delimiter = x.query.get("delimiter") ?? "";
  const startAfter = x.query.get("start-after");
  const token = x.query.get("continuation-token");
  const maxKeys = maxKeysParameter(x.query, "max-keys");
  const encode = encoderFor(x.query);
  const after = token !== undefined ? afterContinuationToken(token) : (startAfter ?? "");
  await backend.store.bucket(x.bucket);
  const page = listPage(await backend.store.list(x.bucket), { prefix, delimiter, after, maxKeys });
  const owner = x.query.get("fetch-owner") === "true" ? ownerElement(backend) : undefined;
  sendXml(x.res, 200, [
    "ListBucketResult",
    [
      ["Name", x.bucket],
      ["Prefix", encode(prefix)],
      ...(startAfter === undefined ? [] : [["StartAfter", encode(startAfter)] as const]),
      ...(token === undefined ? [] : [["ContinuationToken", token] as const]),
      ["MaxKeys", maxKeys],
      ["Delimiter", encode(delimiter)],
      ...(x.query.has("encoding-type") ? [["EncodingType", "url"] as const] : []),
      ["IsTruncated", page.truncated],
      ...(page.nextMarker === undefined
        ? []
        : [["NextContinuationToken", continuationToken(page.nextMarker)] as const]),
      ["KeyCount", page.objects.length + page.commonPrefixes.length],
      ...page.objects.map((object) => contentsElement(object, encode, owner)),
      ...page.commonPrefixes.map((common): XmlElement => ["CommonPrefixes", [["Prefix", encode(common)]]]),
    ],
  ]);
}

/** GET /?uploads (ListMultipartUploads): prefix, key-marker, upload-id-marker, max-uploads. */
export async function listMultipartUploads(x: Exchange, backend: OssBackend): Promise<void> {
  const prefix = x.query.get("prefix") ?? "";
  const keyMarker = x.query.get("key-marker") ?? "";
  const uploadIdMarker = x.query.get("upload-id-marker") ?? "";
  const maxUploads = integerParameter(x.query, "max-uploads", 1000, 1, 1000, (value) =>
    invalidArgument("Argument max-uploads must be an integer between 1 and 1000.", "max-uploads", value),
  );
  const encode = encoderFor(x.query);
  const pending = (await backend.uploads.list(x.bucket)).filter(
    (upload) =>
      upload.key.startsWith(prefix) &&
      (upload.key > keyMarker || (upload.key === keyMarker && upload.uploadId > uploadIdMarker)),
  );
  const page = pending.slice(0, maxUploads);
  const last = page.at(-1);
  const truncated = pending.length > page.length;
  sendXml(x.res, 200, [
    "ListMultipartUploadsResult",
    [
      ["Bucket", x.bucket],
      ["KeyMarker", encode(keyMarker)],
      ["UploadIdMarker", uploadIdMarker],
      ["NextKeyMarker", truncated && last !== undefined ? encode(last.key) : ""],
      ["NextUploadIdMarker", truncated && last !== undefined ? last.uploadId : ""],
      ["Delimiter", ""],
      ["Prefix", encode(prefix)],
      ["MaxUploads", maxUploads],
      ["IsTruncated", truncated],
      ...page.map(
        (upload): XmlElement => [
          "Upload",
          [
            ["Key", encode(upload.key)],
            ["UploadId", upload.uploadId],
            ["Initiated", upload.initiated],
          ],
        ],
      ),
    ],
  ]);
}

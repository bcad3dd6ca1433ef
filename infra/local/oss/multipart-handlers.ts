// The HTTP side of multipart uploads: POST ?uploads, PUT ?partNumber&uploadId, GET ?uploadId,
// POST ?uploadId (complete), DELETE ?uploadId (abort).
import { MAX_SINGLE_UPLOAD_BYTES, receiveBody } from "./body.ts";
import { invalidArgument, malformedXml, notImplemented } from "./errors.ts";
import {
  type Exchange,
  integerParameter,
  locationOf,
  type OssBackend,
  readSmallBody,
  sendEmpty,
  sendXml,
} from "./exchange.ts";
import { MAX_PART_NUMBER } from "./multipart.ts";
import { bodyExpectations, headersToStore } from "./object-handlers.ts";
import { elementsNamed, firstText, type XmlElement } from "./xml.ts";

/** 10,000 parts of about a hundred bytes of XML each, with room to spare. */
const MAX_COMPLETE_BODY_BYTES = 4 * 1024 * 1024;

function uploadIdOf(x: Exchange): string {
  return x.query.get("uploadId") ?? "";
}

export async function initiateMultipartUpload(x: Exchange, backend: OssBackend): Promise<void> {
  const upload = await backend.uploads.initiate(x.bucket, x.key, headersToStore(x.req));
  sendXml(x.res, 200, [
    "InitiateMultipartUploadResult",
    [
      ["Bucket", x.bucket],
      ["Key", x.key],
      ["UploadId", upload.uploadId],
    ],
  ]);
}

export async function uploadPart(x: Exchange, backend: OssBackend): Promise<void> {
  const partNumber = integerParameter(x.query, "partNumber", 0, 1, MAX_PART_NUMBER, (value) =>
    invalidArgument("Part number must be an integer between 1 and 10000, inclusive.", "partNumber", value),
  );
  if (partNumber === 0) {
    throw invalidArgument("Part number must be an integer between 1 and 10000, inclusive.", "partNumber", "");
  }
  if (x.req.headers["x-oss-copy-source"] !== undefined) throw notImplemented("UploadPartCopy");
  // Refuse an unknown upload before receiving a part that may be GiBs.
  await backend.uploads.get(x.bucket, x.key, uploadIdOf(x));
  const received = await receiveBody(
    x.req,
    backend.store.tempPath(),
    bodyExpectations(x.req, MAX_SINGLE_UPLOAD_BYTES),
  );
  const part = await backend.uploads.uploadPart(x.bucket, x.key, uploadIdOf(x), partNumber, received);
  sendEmpty(x.res, 200, { etag: part.etag, "content-md5": received.md5.toString("base64") });
}

export async function listParts(x: Exchange, backend: OssBackend): Promise<void> {
  const maxParts = integerParameter(x.query, "max-parts", 1000, 1, 1000, (value) =>
    invalidArgument("Argument max-parts must be an integer between 1 and 1000.", "max-parts", value),
  );
  const marker = integerParameter(x.query, "part-number-marker", 0, 0, MAX_PART_NUMBER, (value) =>
    invalidArgument("Argument part-number-marker must be an integer.", "part-number-marker", value),
  );
  const { upload, parts } = await backend.uploads.listParts(x.bucket, x.key, uploadIdOf(x));
  const after = parts.filter((part) => part.partNumber > marker);
  const page = after.slice(0, maxParts);
  const truncated = after.length > page.length;
  sendXml(x.res, 200, [
    "ListPartsResult",
    [
      ["Bucket", x.bucket],
      ["Key", upload.key],
      ["UploadId", upload.uploadId],
      ["PartNumberMarker", marker],
      ["NextPartNumberMarker", page.at(-1)?.partNumber ?? marker],
      ["MaxParts", maxParts],
      ["IsTruncated", truncated],
      ...page.map(
        (part): XmlElement => [
          "Part",
          [
            ["PartNumber", part.partNumber],
            ["LastModified", part.lastModified],
            ["ETag", part.etag],
            ["Size", part.size],
          ],
        ],
      ),
    ],
  ]);
}

export async function completeMultipartUpload(x: Exchange, backend: OssBackend): Promise<void> {
  const xml = await readSmallBody(x.req, MAX_COMPLETE_BODY_BYTES);
  const [document] = elementsNamed(xml, "CompleteMultipartUpload");
  if (document === undefined) throw malformedXml();
  const requested = elementsNamed(document, "Part").map((part) => {
    const number = (firstText(part, "PartNumber") ?? "").trim();
    const etag = firstText(part, "ETag");
    if (!/^\d+$/.test(number) || etag === undefined) throw malformedXml();
    return { partNumber: Number(number), etag };
  });
  const object = await backend.uploads.complete(x.bucket, x.key, uploadIdOf(x), requested);
  sendXml(
    x.res,
    200,
    [
      "CompleteMultipartUploadResult",
      [
        [
          "Location",
          `http://${x.bucket}.${locationOf(backend.region)}.aliyuncs.com/${x.key.split("/").map(encodeURIComponent).join("/")}`,
        ],
        ["Bucket", x.bucket],
        ["Key", x.key],
        ["ETag", object.etag],
      ],
    ],
    { etag: object.etag },
  );
}

export async function abortMultipartUpload(x: Exchange, backend: OssBackend): Promise<void> {
  await backend.uploads.abort(x.bucket, x.key, uploadIdOf(x));
  sendEmpty(x.res, 204);
}

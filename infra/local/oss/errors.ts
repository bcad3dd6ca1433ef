// OSS answers every failure with an XML <Error> document (Code, Message, RequestId, HostId and
// fields specific to the error) and the request id in the x-oss-request-id header; clients such
// as ali-oss turn <Code> into err.code and `${Code}Error` into err.name. The codes, statuses and
// messages below are the ones OSS documents for each case.
import { renderXmlDocument, type XmlElement } from "./xml.ts";

export class OssError extends Error {
  readonly status: number;
  readonly code: string;
  /** Extra elements of the <Error> document (BucketName, Key, StringToSign, ...). */
  readonly details: Readonly<Record<string, string>>;

  constructor(status: number, code: string, message: string, details: Record<string, string> = {}) {
    super(message);
    this.name = "OssError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export function renderError(error: OssError, requestId: string, hostId: string): string {
  const elements: XmlElement[] = [
    ["Code", error.code],
    ["Message", error.message],
    ["RequestId", requestId],
    ["HostId", hostId],
    ...Object.entries(error.details).map(([name, value]): XmlElement => [name, value]),
  ];
  return renderXmlDocument(["Error", elements]);
}

export const noSuchBucket = (bucket: string) =>
  new OssError(404, "NoSuchBucket", "The specified bucket does not exist.", { BucketName: bucket });

export const noSuchKey = (key: string) =>
  new OssError(404, "NoSuchKey", "The specified key does not exist.", { Key: key });

export const noSuchUpload = (uploadId: string) =>
  new OssError(
    404,
    "NoSuchUpload",
    "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
    { UploadId: uploadId },
  );

export const bucketNotEmpty = (bucket: string) =>
  new OssError(409, "BucketNotEmpty", "The bucket you tried to delete is not empty.", { BucketName: bucket });

export const invalidBucketName = (bucket: string) =>
  new OssError(400, "InvalidBucketName", "The specified bucket is not valid.", { BucketName: bucket });

export const invalidObjectName = (reason: string) => new OssError(400, "InvalidObjectName", reason);

export const invalidArgument = (message: string, name: string, value: string) =>
  new OssError(400, "InvalidArgument", message, { ArgumentName: name, ArgumentValue: value });

export const invalidDigest = (expected: string, calculated?: string) =>
  new OssError(
    400,
    "InvalidDigest",
    "The Content-MD5 you specified was invalid.",
    calculated === undefined ? { ContentMD5: expected } : { ContentMD5: expected, CalculatedMD5: calculated },
  );

export const contentSha256Mismatch = (expected: string, calculated: string) =>
  new OssError(
    400,
    "InvalidArgument",
    "The x-oss-content-sha256 you specified did not match what we received.",
    { ClientComputedContentSHA256: expected, ServerComputedContentSHA256: calculated },
  );

export const entityTooLarge = (maxBytes: number) =>
  new OssError(400, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size.", {
    MaxSizeAllowed: String(maxBytes),
  });

export const entityTooSmall = (partNumber: number, size: number, minSize: number) =>
  new OssError(400, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size.", {
    PartNumber: String(partNumber),
    ProposedSize: String(size),
    MinSizeAllowed: String(minSize),
  });

export const incompleteBody = () =>
  new OssError(
    400,
    "IncompleteBody",
    "You did not provide the number of bytes specified by the Content-Length HTTP header.",
  );

export const malformedXml = () =>
  new OssError(
    400,
    "MalformedXML",
    "The XML you provided was not well-formed or did not validate against our published schema.",
  );

export const invalidPart = (partNumber: number, etag: string) =>
  new OssError(
    400,
    "InvalidPart",
    "One or more of the specified parts could not be found or the specified entity tag might not have matched the part's entity tag.",
    { PartNumber: String(partNumber), ETag: etag },
  );

export const invalidPartOrder = () =>
  new OssError(
    400,
    "InvalidPartOrder",
    "The list of parts was not in ascending order. Parts list must be specified in order by part number.",
  );

export const invalidRange = (range: string, size: number) =>
  new OssError(416, "InvalidRange", "The requested range cannot be satisfied", {
    RangeRequested: range,
    ActualObjectSize: String(size),
  });

export const preconditionFailed = (condition: string) =>
  new OssError(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.", {
    Condition: condition,
  });

export const invalidUri = () => new OssError(400, "InvalidURI", "The request URI is not valid.");

export const accessDenied = (message: string) => new OssError(403, "AccessDenied", message);

export const invalidAccessKeyId = (accessKeyId: string) =>
  new OssError(
    403,
    "InvalidAccessKeyId",
    "The OSS Access Key Id you provided does not exist in our records.",
    {
      OSSAccessKeyId: accessKeyId,
    },
  );

export const signatureDoesNotMatch = (
  accessKeyId: string,
  stringToSign: string,
  extra: Record<string, string> = {},
) =>
  new OssError(
    403,
    "SignatureDoesNotMatch",
    "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
    { OSSAccessKeyId: accessKeyId, StringToSign: stringToSign, ...extra },
  );

export const requestTimeTooSkewed = (requestTime: string, serverTime: string, maxSkewMs: number) =>
  new OssError(
    403,
    "RequestTimeTooSkewed",
    "The difference between the request time and the current time is too large.",
    { RequestTime: requestTime, ServerTime: serverTime, MaxAllowedSkewMilliseconds: String(maxSkewMs) },
  );

export const methodNotAllowed = (method: string, resource: string) =>
  new OssError(405, "MethodNotAllowed", "The specified method is not allowed against this resource.", {
    Method: method,
    ResourceType: resource,
  });

export const notImplemented = (what: string) =>
  new OssError(501, "NotImplemented", `This local OSS server does not implement ${what}.`);

export const internalError = () =>
  new OssError(500, "InternalError", "We encountered an internal error. Please try again.");

// Errors as JSON: every answer that is not a success is `{ statusCode, error, message }` with a
// message a person can act on. Schema violations get sentences naming the field and what it must
// be; unexpected failures say only that they happened (details go to the log, never to the caller).
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Logger } from "../../shared/log.ts";

export class HttpError extends Error {
  override name = "HttpError";
  readonly statusCode: number;
  /** CamelCase, like Kubernetes Status reasons: NotFound, Forbidden, … */
  readonly reason: string;

  constructor(statusCode: number, reason: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.statusCode = statusCode;
    this.reason = reason;
  }
}

export const unauthorized = (message: string) => new HttpError(401, "Unauthorized", message);
export const forbidden = (message: string) => new HttpError(403, "Forbidden", message);
export const notFound = (message: string) => new HttpError(404, "NotFound", message);
export const unavailable = (message: string, cause: unknown) =>
  new HttpError(503, "ServiceUnavailable", message, { cause });

export interface ErrorBody {
  statusCode: number;
  error: string;
  message: string;
}

const REASONS: Record<number, string> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  405: "MethodNotAllowed",
  406: "NotAcceptable",
  408: "RequestTimeout",
  413: "RequestEntityTooLarge",
  414: "URITooLong",
  415: "UnsupportedMediaType",
  429: "TooManyRequests",
  431: "RequestHeaderFieldsTooLarge",
  503: "ServiceUnavailable",
};

export function errorBody(statusCode: number, message: string, reason?: string): ErrorBody {
  return {
    statusCode,
    error: reason ?? REASONS[statusCode] ?? (statusCode < 500 ? "BadRequest" : "InternalError"),
    message,
  };
}

/** A value for an error message, cut short (saying how long it was) so a huge input is not echoed back whole. */
function brief(value: unknown): string {
  if (typeof value === "string" && value.length > 60)
    return `${JSON.stringify(`${value.slice(0, 57)}...`)} (${value.length} characters)`;
  const text = typeof value === "string" ? JSON.stringify(value) : (JSON.stringify(value) ?? String(value));
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

interface ValidationIssue {
  keyword: string;
  instancePath: string;
  message?: string;
  params: Record<string, unknown>;
  data?: unknown;
  parentSchema?: { description?: string };
}

function where(dataVar: string, instancePath: string): string {
  const field = instancePath.split("/").slice(1).join(".");
  if (dataVar === "params") return `path parameter ${JSON.stringify(field)}`;
  if (dataVar === "querystring") return field ? `query parameter ${JSON.stringify(field)}` : "the query";
  if (dataVar === "headers") return `header ${JSON.stringify(field)}`;
  return field ? `body field ${JSON.stringify(field)}` : "the body";
}

/** One sentence for the first schema violation (Ajv runs with allErrors off). */
export function describeValidation(issue: ValidationIssue, dataVar: string): string {
  const at = where(dataVar, issue.instancePath);
  const expected = issue.parentSchema?.description;
  switch (issue.keyword) {
    case "required":
      return `${at} is missing the required field ${JSON.stringify(issue.params.missingProperty)}`;
    case "additionalProperties":
      return `${at} has an unknown field ${brief(issue.params.additionalProperty)}`;
    case "type":
      return `${at} must be ${issue.params.type === "object" ? "a JSON object" : `of type ${String(issue.params.type)}`} (got ${brief(issue.data)})`;
    case "pattern":
    case "minLength":
    case "maxLength":
    case "format":
    case "enum":
    case "const":
      return `${at} ${brief(issue.data)} is invalid: ${expected ? `it must be ${expected}` : (issue.message ?? "")}`;
    default:
      return `${at} ${issue.message ?? "is invalid"}`;
  }
}

export function schemaErrorFormatter(errors: unknown[], dataVar: string): Error {
  const first = errors[0] as ValidationIssue | undefined;
  return new HttpError(
    400,
    "BadRequest",
    first ? describeValidation(first, dataVar) : `${dataVar} is invalid`,
  );
}

/** The status a library error carries (fastify's own errors, body parsing, rate limiting). */
function statusOf(error: unknown): number | undefined {
  if (!(error instanceof Error) || !("statusCode" in error)) return undefined;
  const status = (error as FastifyError).statusCode;
  return typeof status === "number" ? status : undefined;
}

/** The JSON error answers of the whole server (routes that do not exist: server.ts). */
export function installErrorHandling(app: FastifyInstance, log: Logger): void {
  app.setErrorHandler((error: unknown, request: FastifyRequest, reply: FastifyReply) => {
    if (error instanceof HttpError) {
      if (error.statusCode >= 500)
        log.warn({ err: error.cause ?? error, route: request.routeOptions.url }, error.message);
      return reply.code(error.statusCode).send(errorBody(error.statusCode, error.message, error.reason));
    }
    const status = statusOf(error);
    if (status !== undefined && status >= 400 && status < 500) {
      return reply
        .code(status)
        .send(errorBody(status, error instanceof Error ? error.message : "bad request"));
    }
    log.error({ err: error, method: request.method, route: request.routeOptions.url }, "request failed");
    return reply.code(500).send(errorBody(500, "internal error; the operator's log has the details"));
  });
}

// What each request of an S3 client carried once signed: the command, its payload hash header and
// its length. For tests that check how an upload is sent (parts, single puts, unsigned payloads).
import type { S3Client } from "@aws-sdk/client-s3";

export interface SentRequest {
  command: string;
  payloadHash: string | undefined;
  length: string | undefined;
}

/** Records every request `client` sends from now on, after signing, into the returned array. */
export function watchRequests(client: S3Client): SentRequest[] {
  const sent: SentRequest[] = [];
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const request = args.request as { headers?: Record<string, string> };
      sent.push({
        command: context.commandName ?? "",
        payloadHash: request.headers?.["x-amz-content-sha256"],
        length: request.headers?.["content-length"],
      });
      return next(args);
    },
    { step: "finalizeRequest", priority: "low", name: "spy" },
  );
  return sent;
}

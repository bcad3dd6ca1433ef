// The few HTTP outcomes of Kubernetes API calls that callers treat as normal: 404 on a read or a
// delete (already gone), 409 on a create (already there). Shared by the operator and the kubelet.

export function httpStatusOf(error: unknown): number | undefined {
  if (typeof error === "object" && error !== null && "code" in error && typeof error.code === "number")
    return error.code;
  return undefined;
}

/** The object, or undefined when the API says 404. */
export async function orUndefinedOn404<T>(work: Promise<T>): Promise<T | undefined> {
  try {
    return await work;
  } catch (error) {
    if (httpStatusOf(error) === 404) return undefined;
    throw error;
  }
}

/** Ignores "already exists" (409) so creates can be replayed. */
export async function ignoreConflict(work: Promise<unknown>): Promise<void> {
  try {
    await work;
  } catch (error) {
    if (httpStatusOf(error) !== 409) throw error;
  }
}

/**
 * Ignores "gone" (404) and "precondition failed / changed meanwhile" (409): the object moved on.
 * Returns what the call returned, or undefined when it was ignored.
 */
export async function ignoreGoneOrConflict<T>(work: Promise<T>): Promise<T | undefined> {
  try {
    return await work;
  } catch (error) {
    const status = httpStatusOf(error);
    if (status !== 404 && status !== 409) throw error;
    return undefined;
  }
}

/**
 * What a failed call says, for a condition or an Event: the API server's own Status message
 * ("pods \"x\" is forbidden: no PriorityClass with name y was found") when the error (or one it
 * wraps) carries one, rather than the client's dump of code, body and response headers.
 */
export function apiErrorMessage(error: unknown): string {
  for (let e: unknown = error; typeof e === "object" && e !== null; e = (e as { cause?: unknown }).cause) {
    const body = "body" in e ? e.body : undefined;
    const status = typeof body === "string" ? parseStatus(body) : body;
    if (typeof status === "object" && status !== null && "message" in status) {
      const message = status.message;
      if (typeof message === "string" && message !== "") return message;
    }
  }
  return error instanceof Error ? error.message : String(error);
}

function parseStatus(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

// Unit tests of what a failed Kubernetes call turns into for conditions and Events.
import t from "tap";
import { apiErrorMessage } from "../shared/kube-errors.ts";

/** Shaped as @kubernetes/client-node's ApiException: a code, the raw body, and a long message. */
function apiException(code: number, body: string): Error {
  return Object.assign(
    new Error(`HTTP-Code: ${code}\nMessage: Unknown API Status Code!\nBody: ${body}\nHeaders: {}`),
    {
      code,
      body,
    },
  );
}

t.test("the API server's Status message, not the client's dump", async (t) => {
  const status = JSON.stringify({
    kind: "Status",
    status: "Failure",
    message: 'pods "c-abc" is forbidden: no PriorityClass with name low was found',
    code: 403,
  });
  t.equal(
    apiErrorMessage(apiException(403, status)),
    'pods "c-abc" is forbidden: no PriorityClass with name low was found',
  );
  t.equal(
    apiErrorMessage(new Error("creating member pod", { cause: apiException(403, status) })),
    'pods "c-abc" is forbidden: no PriorityClass with name low was found',
    "found in a wrapped error too",
  );
});

t.test("without a Status, the error's own message", async (t) => {
  t.equal(apiErrorMessage(apiException(502, "<html>bad gateway</html>")).split("\n")[0], "HTTP-Code: 502");
  t.equal(apiErrorMessage(new Error("etcd: no leader")), "etcd: no leader");
  t.equal(apiErrorMessage("plain"), "plain");
  t.equal(
    apiErrorMessage(apiException(500, JSON.stringify({ kind: "Status", message: "" }))).split("\n")[0],
    "HTTP-Code: 500",
    "an empty Status message is no message",
  );
});

import type { JsonObject } from "@bufbuild/protobuf";
import { sendJson, type NodeResponse } from "../node-http.js";

// Every refusal of the /endpoints/ routes is in OpenAI's error shape, so that an OpenAI client
// raises it with its message, type and code; `detail` stays for the callers that read this API's
// own shape (SPEC section 2, "Keys for callers", Refusals).

/** OpenAI's `error.type` and a default `error.code` for a status the proxy answers itself. */
const KINDS: Record<number, { type: string; code: string }> = {
  400: { type: "invalid_request_error", code: "invalid_path" },
  401: { type: "authentication_error", code: "invalid_api_key" },
  403: { type: "permission_error", code: "permission_denied" },
  404: { type: "not_found_error", code: "not_found" },
  413: { type: "invalid_request_error", code: "request_too_large" },
  429: { type: "rate_limit_exceeded", code: "rate_limit_exceeded" },
  500: { type: "server_error", code: "internal_error" },
  502: { type: "server_error", code: "replica_unreachable" },
  503: { type: "server_error", code: "service_unavailable" },
};

export interface RefusalBody extends JsonObject {
  error: { message: string; type: string; code: string };
  detail: string;
}

/** The body of a refusal: `{"error": {message, type, code}, "detail"}`; `kind` overrides type and code. */
export function refusalBody(status: number, detail: string, kind: Partial<RefusalBody["error"]> = {}): RefusalBody {
  const known = KINDS[status] ?? (status >= 500 ? KINDS[500]! : KINDS[400]!);
  return { error: { message: detail, type: kind.type ?? known.type, code: kind.code ?? known.code }, detail };
}

/** Answers a refusal of the /endpoints/ routes in that shape. */
export function sendRefusalBody(
  res: NodeResponse,
  status: number,
  detail: string,
  headers: Record<string, string> = {},
  kind: Partial<RefusalBody["error"]> = {},
): void {
  sendJson(res, status, refusalBody(status, detail, kind), headers);
}

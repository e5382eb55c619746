import type { NodeRequest } from "./node-http.js";

// A client that disconnects before its request is read or answered is routine (a timeout on its
// side, a cancelled page): it is logged once at info, never as a server error with a stack trace.

const CLIENT_GONE_CODES = new Set(["ECONNRESET", "ERR_STREAM_PREMATURE_CLOSE", "ERR_HTTP2_STREAM_CANCEL"]);

export const CLIENT_LEFT_MESSAGE = "client left before its answer";

/** True when `err` arose because the client of `req` went away. */
export function clientLeft(req: NodeRequest, err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === "string" && CLIENT_GONE_CODES.has(code)) return true;
  return req.destroyed && !req.complete;
}

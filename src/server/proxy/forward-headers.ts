import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";

// Headers across the proxy, as RFC 9110 section 7.6.1 asks of an intermediary: hop-by-hop headers
// (and any the Connection header names) stay on their own hop, HTTP/2 pseudo-headers never become
// HTTP/1.1 headers, and an HTTP/2 answer must carry no connection-specific header at all.

/** Headers that stay on their own hop (RFC 9110 section 7.6.1). */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "http2-settings",
]);

/**
 * What the replica gets: the caller's headers without hop-by-hop ones, without the caller's
 * Authorization (a token of this service, never a stranger's machine's business) and with the
 * replica's own key instead. Host is the replica's, set by the HTTP client from the URL. Expect
 * is answered on the caller's hop (node:http sends its 100 Continue), so the replica never sees it.
 */
export function upstreamHeaders(incoming: IncomingHttpHeaders, apiKey: string | null): OutgoingHttpHeaders {
  const dropped = connectionTokens(incoming.connection);
  const out: OutgoingHttpHeaders = {};
  for (const name in incoming) {
    if (name.charCodeAt(0) === 58 /* ":" */ || HOP_BY_HOP.has(name) || name === "host" || name === "authorization" || name === "expect") continue;
    if (dropped !== undefined && dropped.has(name)) continue;
    out[name] = incoming[name];
  }
  if (apiKey !== null) out.authorization = `Bearer ${apiKey}`;
  return out;
}

/** What the caller gets: the replica's headers without hop-by-hop ones, naming the replica. */
export function downstreamHeaders(incoming: IncomingHttpHeaders, instanceId: string): OutgoingHttpHeaders {
  const dropped = connectionTokens(incoming.connection);
  const out: OutgoingHttpHeaders = {};
  for (const name in incoming) {
    if (HOP_BY_HOP.has(name)) continue;
    if (dropped !== undefined && dropped.has(name)) continue;
    out[name] = incoming[name];
  }
  out["x-endpoint-instance"] = instanceId;
  return out;
}

function connectionTokens(connection: string | undefined): Set<string> | undefined {
  // The common values name no other header (and both are hop-by-hop themselves).
  if (connection === undefined || connection === "keep-alive" || connection === "close") return undefined;
  return new Set(connection.split(",").map((token) => token.trim().toLowerCase()));
}

// `/endpoints/{name}/v1/...`: which endpoint a request names and the path its replica is asked for.

export const ENDPOINT_PREFIX = "/endpoints/";

/** The route pattern requests through the proxy are counted under (never the raw path). */
export const ENDPOINT_ROUTE = "/endpoints/{name}/v1/*";

export type EndpointPath =
  | { kind: "ok"; name: string; /** `/v1/...` with the query string, as the replica gets it. */ upstreamPath: string }
  | { kind: "not_found" }
  | { kind: "invalid"; detail: string };

const NAME = /^[a-z][a-z0-9-]{0,39}$/;
// A dot segment, plain or percent-encoded: the replica must never be asked for a path outside /v1/.
const DOT_SEGMENT = /(^|\/)(\.|%2e){1,2}(\/|$)/i;

/** Parses a request URL that starts with ENDPOINT_PREFIX. */
export function parseEndpointPath(url: string): EndpointPath {
  const slash = url.indexOf("/", ENDPOINT_PREFIX.length);
  if (slash < 0) return { kind: "not_found" };
  const name = url.slice(ENDPOINT_PREFIX.length, slash);
  const upstreamPath = url.slice(slash);
  if (!NAME.test(name) || !(upstreamPath.startsWith("/v1/") || upstreamPath === "/v1" || upstreamPath.startsWith("/v1?"))) {
    return { kind: "not_found" };
  }
  const pathOnly = upstreamPath.split("?", 1)[0]!;
  if (DOT_SEGMENT.test(pathOnly) || /%2f|%5c|\\/i.test(pathOnly)) {
    return { kind: "invalid", detail: "the path may not hold dot segments or encoded slashes" };
  }
  return { kind: "ok", name, upstreamPath };
}

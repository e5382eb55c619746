import { createHash, timingSafeEqual } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

/**
 * Checks `Authorization: Bearer <token>` against the configured tokens in constant time (both
 * sides are hashed to equal length first). With no tokens configured every call is allowed;
 * the server then binds to loopback only (src/config.ts).
 */
export function createTokenCheck(tokens: readonly string[]): (authorization: string | null | undefined) => boolean {
  const expected = tokens.map(digest);
  return (authorization) => {
    if (expected.length === 0) return true;
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "");
    const given = digest(match?.[1] ?? "");
    let ok = false;
    for (const candidate of expected) ok = timingSafeEqual(candidate, given) || ok;
    return ok && match !== null;
  };
}

export const UNAUTHENTICATED_MESSAGE = "missing or invalid bearer token";

export function createAuthInterceptor(isAuthorized: ReturnType<typeof createTokenCheck>): Interceptor {
  return (next) => async (req) => {
    if (!isAuthorized(req.header.get("authorization"))) {
      throw new ConnectError(UNAUTHENTICATED_MESSAGE, Code.Unauthenticated);
    }
    return next(req);
  };
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}

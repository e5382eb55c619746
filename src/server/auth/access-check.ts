import { Code } from "@connectrpc/connect";
import { ACTOR_ANONYMOUS } from "../../actor.js";
import { excerpt } from "../../errors.js";
import { sendJson, type NodeResponse } from "../node-http.js";
import { isKeyShaped } from "../keys/key-secret.js";
import type { KeyDirectory, KeyGrant } from "../keys/key-directory.js";
import type { Scope } from "./scopes.js";
import type { TokenSource } from "./token-source.js";

// The one check of every protocol: who is calling (401 when nobody we know), and may they do this
// (403 naming the scope). The RPC interceptor (auth-interceptor.ts) and the plain HTTP routes
// (/metrics, the API docs, the endpoint proxy) both ask it; a plain route answers a refusal with
// sendRefusal and otherwise acts as `verdict.actor`. A key of the directory (server/keys/) opens
// only the endpoint routes, and of those only its own endpoints; a bearer shaped like a key that
// opens nothing (unknown, revoked, expired) is refused whether static tokens are configured or not.

export const UNAUTHENTICATED_MESSAGE = "missing or invalid bearer token";

export type AccessVerdict =
  | { ok: true; actor: string; /** The key that opened it (keys only): its limits for the proxy. */ key?: KeyGrant }
  | { ok: false; code: Code.Unauthenticated | Code.PermissionDenied; status: 401 | 403; detail: string };

export type AccessCheck = (
  authorization: string | null | undefined,
  /** Undefined: the route has no scope in the table; refused to every token (fail closed). */
  scope: Scope | undefined,
  /** What is asked for, for the 403 detail: `GET /metrics`, `gpu.v1.GpuService/CreateInstance`. */
  what: string,
  /** The endpoint an `/endpoints/{name}/...` request is for, so that a key's endpoints are checked. */
  endpoint?: string,
) => AccessVerdict;

const BEARER = /^Bearer\s+(\S+)\s*$/i;

export function createAccessCheck(source: TokenSource, keys?: KeyDirectory): AccessCheck {
  return (authorization, scope, what, endpoint) => {
    const bearer = BEARER.exec(authorization ?? "")?.[1];
    if (keys && bearer !== undefined && isKeyShaped(bearer)) {
      const lookup = keys.lookUp(bearer);
      if (lookup.found === "live") return checkKey(keys, lookup.grant, scope, endpoint);
      // A static token may have a key's shape; anything else of that shape opens nothing.
      if (!source.current().find(authorization)) return unauthenticated(lookup.found === "expired" ? `key '${lookup.name}' has expired` : UNAUTHENTICATED_MESSAGE);
    }
    if (!source.enabled) return { ok: true, actor: ACTOR_ANONYMOUS };
    const token = source.current().find(authorization);
    if (!token) return unauthenticated(UNAUTHENTICATED_MESSAGE);
    if (scope === undefined) {
      return { ok: false, code: Code.PermissionDenied, status: 403, detail: `${what} has no scope in the scope table: nobody may call it` };
    }
    if (!token.scopes.has(scope)) {
      return { ok: false, code: Code.PermissionDenied, status: 403, detail: `token '${token.name}' may not call ${what}: it needs scope ${scope}` };
    }
    return { ok: true, actor: token.name };
  };
}

function unauthenticated(detail: string): AccessVerdict {
  return { ok: false, code: Code.Unauthenticated, status: 401, detail };
}

/** A live key: only the endpoint routes (401 elsewhere), only its endpoints, priced ones if it has a budget (403). */
function checkKey(keys: KeyDirectory, key: KeyGrant, scope: Scope | undefined, endpoint: string | undefined): AccessVerdict {
  if (scope !== "endpoints:invoke") return unauthenticated(`key '${key.name}' opens only /endpoints/{name}/v1/...`);
  if (endpoint !== undefined) {
    if (key.endpoints.size > 0 && !key.endpoints.has(endpoint)) {
      return forbidden(`key '${key.name}' may not call endpoint '${excerpt(endpoint)}': it may call ${[...key.endpoints].join(", ")}`);
    }
    if (key.hasBudget && !keys.isPriced(endpoint)) {
      return forbidden(`key '${key.name}' has a max_budget and endpoint '${excerpt(endpoint)}' has no token_price: a budget cannot be kept on an unpriced endpoint`);
    }
  }
  return { ok: true, actor: key.name, key };
}

function forbidden(detail: string): AccessVerdict {
  return { ok: false, code: Code.PermissionDenied, status: 403, detail };
}

/** Answers a refusal over plain HTTP: 401 with its challenge, or 403, as `{"detail"}`. */
export function sendRefusal(res: NodeResponse, verdict: Extract<AccessVerdict, { ok: false }>): void {
  sendJson(res, verdict.status, { detail: verdict.detail }, verdict.status === 401 ? { "www-authenticate": "Bearer" } : {});
}

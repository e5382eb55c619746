import { Code } from "@connectrpc/connect";
import { ACTOR_ANONYMOUS } from "../../actor.js";
import { sendJson, type NodeResponse } from "../node-http.js";
import type { Scope } from "./scopes.js";
import type { TokenSource } from "./token-source.js";

// The one check of every protocol: who is calling (401 when nobody we know), and may they do this
// (403 naming the scope). The RPC interceptor (auth-interceptor.ts) and the plain HTTP routes
// (/metrics, the API docs, the endpoint proxy) both ask it; a plain route answers a refusal with
// sendRefusal and otherwise acts as `verdict.actor`.

export const UNAUTHENTICATED_MESSAGE = "missing or invalid bearer token";

export type AccessVerdict =
  | { ok: true; actor: string }
  | { ok: false; code: Code.Unauthenticated | Code.PermissionDenied; status: 401 | 403; detail: string };

export type AccessCheck = (
  authorization: string | null | undefined,
  /** Undefined: the route has no scope in the table; refused to every token (fail closed). */
  scope: Scope | undefined,
  /** What is asked for, for the 403 detail: `GET /metrics`, `gpu.v1.GpuService/CreateInstance`. */
  what: string,
) => AccessVerdict;

export function createAccessCheck(source: TokenSource): AccessCheck {
  return (authorization, scope, what) => {
    if (!source.enabled) return { ok: true, actor: ACTOR_ANONYMOUS };
    const token = source.current().find(authorization);
    if (!token) return { ok: false, code: Code.Unauthenticated, status: 401, detail: UNAUTHENTICATED_MESSAGE };
    if (scope === undefined) {
      return { ok: false, code: Code.PermissionDenied, status: 403, detail: `${what} has no scope in the scope table: nobody may call it` };
    }
    if (!token.scopes.has(scope)) {
      return { ok: false, code: Code.PermissionDenied, status: 403, detail: `token '${token.name}' may not call ${what}: it needs scope ${scope}` };
    }
    return { ok: true, actor: token.name };
  };
}

/** Answers a refusal over plain HTTP: 401 with its challenge, or 403, as `{"detail"}`. */
export function sendRefusal(res: NodeResponse, verdict: Extract<AccessVerdict, { ok: false }>): void {
  sendJson(res, verdict.status, { detail: verdict.detail }, verdict.status === 401 ? { "www-authenticate": "Bearer" } : {});
}

import { ConnectError, type Interceptor } from "@connectrpc/connect";
import { actorKey } from "../../actor.js";
import type { AccessCheck } from "./access-check.js";
import { scopeOfRpc } from "./scope-table.js";

/**
 * Every RPC, on every protocol and from REST (in-process caller), needs its scope from the table:
 * unauthenticated for an unknown token, permission_denied naming the scope for a token without
 * it. The caller's token name becomes the call's actor (src/actor.ts).
 */
export function createAuthInterceptor(check: AccessCheck): Interceptor {
  return (next) => async (req) => {
    const what = `${req.service.typeName}/${req.method.name}`;
    const verdict = check(req.header.get("authorization"), scopeOfRpc(req.service.typeName, req.method.name), what);
    if (!verdict.ok) throw new ConnectError(verdict.detail, verdict.code);
    req.contextValues.set(actorKey, verdict.actor);
    return next(req);
  };
}

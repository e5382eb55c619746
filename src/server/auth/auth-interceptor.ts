import type { DescMethod } from "@bufbuild/protobuf";
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import { actorKey } from "../../actor.js";
import type { AccessCheck, AccessVerdict } from "./access-check.js";
import { scopeOfRpc } from "./scope-table.js";

/**
 * Every RPC, on every protocol and from REST (in-process caller), needs its scope from the table:
 * unauthenticated for an unknown token, permission_denied naming the scope for a token without
 * it. The caller's token name becomes the call's actor (src/actor.ts).
 */
export function createAuthInterceptor(check: AccessCheck): Interceptor {
  return (next) => async (req) => {
    const verdict = checkRpc(check, req.method, req.header.get("authorization"));
    if (!verdict.ok) throw new ConnectError(verdict.detail, verdict.code);
    req.contextValues.set(actorKey, verdict.actor);
    return next(req);
  };
}

/** The verdict on a call of `method` by the bearer of `authorization`: its scope from the table. */
export function checkRpc(check: AccessCheck, method: DescMethod, authorization: string | null | undefined): AccessVerdict {
  const service = method.parent.typeName;
  return check(authorization, scopeOfRpc(service, method.name), `${service}/${method.name}`);
}

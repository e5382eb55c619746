import { createContextKey, type HandlerContext } from "@connectrpc/connect";

// Who acts: the name written on every operation record (execution log rows, batch logs, index
// runs). The auth interceptor (server/auth/) sets it per call from the caller's token; service
// code reads it here without knowing how it was found.

/** Auth is off: nobody was asked who they are. */
export const ACTOR_ANONYMOUS = "anonymous";
/** The in-process cron runner (scheduled batch and incremental runs). */
export const ACTOR_CRON = "cron";
/** The service's own background work (the sync loop: status changes, auto-destroy, reconcile). */
export const ACTOR_SYSTEM = "system";
/** Records written before actors were recorded. */
export const ACTOR_UNKNOWN = "unknown";

/** Names no token may take: they would pass for the service's own work. */
export const RESERVED_ACTORS: readonly string[] = [ACTOR_ANONYMOUS, ACTOR_CRON, ACTOR_SYSTEM, ACTOR_UNKNOWN];

export const actorKey = createContextKey<string>(ACTOR_ANONYMOUS, { description: "who acts (token name)" });

/** The actor of an RPC call. */
export function actorOf(context: Pick<HandlerContext, "values">): string {
  return context.values.get(actorKey);
}

import type { Knex } from "knex";
import type { Logger } from "pino";
import { databaseUrlOf } from "../../db/knex.js";
import { createSessionLock, type SessionLock } from "../../db/session-lock.js";

// One sync leader per database (SPEC.md section 2, "Request economy"): with several service
// processes on one database, only the holder of a PostgreSQL advisory lock runs the status sync
// and reconcile loop. The lock lives in a session of its own (src/db/session-lock.ts), so a
// leader that dies (or loses its connection) frees it at once, and another process takes it at
// its next round, within one interval.

/** pg_try_advisory_lock key of the GPU sync loop ("gpu-sync" in ASCII). */
export const SYNC_LEADER_LOCK_KEY = "7526466839954025";

export type SyncLeader = SessionLock;

export function createSyncLeader(knex: Knex, logger: Logger): SyncLeader {
  return createSessionLock({
    connectionString: databaseUrlOf(knex),
    key: SYNC_LEADER_LOCK_KEY,
    applicationName: "gpu-sync-leader",
    logger,
    messages: {
      taken: "sync leadership taken",
      released: "sync leadership released",
      lost: "sync leadership lost",
      failed: "sync leader check failed; not leading this round",
    },
  });
}

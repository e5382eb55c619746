import type { Knex } from "knex";
import pg from "pg";
import { databaseUrlOf } from "../../db/knex.js";
import type { Logger } from "pino";

// One sync leader per database (SPEC.md section 2, "Request economy"): with several service
// processes on one database, only the holder of a PostgreSQL advisory lock runs the status sync
// and reconcile loop. The lock lives in a session of its own, a dedicated connection outside the
// pool: it lasts exactly as long as that session, so a leader that dies (or loses its
// connection) frees it at once, and another process takes it at its next round, within one
// interval. Advisory locks are scoped to the database, so one constant key serves every
// deployment.

/** pg_try_advisory_lock key of the GPU sync loop ("gpu-sync" in ASCII). */
const LOCK_KEY = "7526466839954025" as const;

export interface SyncLeader {
  /** Whether this process leads now: keeps the lease it holds, or tries to take a free one. */
  hold(): Promise<boolean>;
  /** Gives the lease up (closes the dedicated connection). */
  release(): Promise<void>;
}

export function createSyncLeader(knex: Knex, logger: Logger): SyncLeader {
  const connectionString = databaseUrlOf(knex);
  let session: pg.Client | undefined;
  let leading = false;

  async function drop(released = false): Promise<void> {
    const old = session;
    session = undefined;
    if (leading && released) logger.info("sync leadership released");
    else if (leading) logger.warn("sync leadership lost");
    leading = false;
    await old?.end().catch(() => undefined);
  }

  async function open(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString });
    // A broken session has lost its lock: the next hold() notices and starts over.
    client.on("error", (err) => {
      logger.warn({ err }, "sync leader connection failed");
      if (session === client) void drop();
    });
    await client.connect();
    return client;
  }

  return {
    async hold() {
      try {
        session ??= await open();
        if (leading) {
          await session.query("select 1"); // the session, and so the lock, is still there
          return true;
        }
        const { rows } = await session.query<{ locked: boolean }>("select pg_try_advisory_lock($1::bigint) as locked", [LOCK_KEY]);
        leading = rows[0]!.locked;
        if (leading) logger.info("sync leadership taken");
        return leading;
      } catch (err) {
        logger.warn({ err }, "sync leader check failed; not leading this round");
        await drop();
        return false;
      }
    },
    async release() {
      await drop(true);
    },
  };
}

import pg from "pg";
import type { Logger } from "pino";

// A PostgreSQL advisory lock held by a session of its own, a dedicated connection outside the
// pool: one holder across every process on the database (the GPU sync leader, the live indexing
// follower). The lock lasts exactly as long as that session, so a holder that dies or loses its
// connection frees it at once, and another process takes it at its next try. Advisory locks are
// scoped to the database, so one constant key serves every deployment.

export interface SessionLock {
  /** Whether this process holds the lock now: keeps the one it holds, or tries to take a free one. */
  hold(): Promise<boolean>;
  /** Gives the lock up (closes the session). */
  release(): Promise<void>;
}

export interface SessionLockOptions {
  connectionString: string;
  /** pg_try_advisory_lock key, a bigint as text. */
  key: string;
  /** The session's application_name, seen in pg_stat_activity. */
  applicationName: string;
  logger: Logger;
  /** Log lines: the lock taken, released, lost with its session, and a failed check. */
  messages: { taken: string; released: string; lost: string; failed: string };
  /** How often a held lock's session is checked with a round trip (0: on every hold()). */
  checkEveryMs?: number;
  /** Called once the lock is taken, on its session (a LISTEN). */
  onTaken?: (session: pg.Client) => Promise<void>;
  /** Called on every notification the session receives. */
  onNotification?: (message: pg.Notification) => void;
}

export function createSessionLock(options: SessionLockOptions): SessionLock {
  const { logger, messages, checkEveryMs = 0 } = options;
  let session: pg.Client | undefined;
  let holding = false;
  let checkedAt = 0;

  async function drop(released = false): Promise<void> {
    const old = session;
    session = undefined;
    if (holding && released) logger.info(messages.released);
    else if (holding) logger.warn(messages.lost);
    holding = false;
    await old?.end().catch(() => undefined);
  }

  async function open(): Promise<pg.Client> {
    const client = new pg.Client({
      connectionString: options.connectionString,
      application_name: options.applicationName,
      connectionTimeoutMillis: 10_000,
      // Without keep-alive a silently dropped session would look alive, and locked, for hours.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    });
    // A broken session has lost its lock: the next hold() notices and starts over.
    client.on("error", (err) => {
      logger.warn({ err: err.message }, messages.failed);
      if (session === client) void drop();
    });
    client.on("end", () => {
      if (session === client) void drop();
    });
    if (options.onNotification) client.on("notification", options.onNotification);
    await client.connect();
    return client;
  }

  return {
    async hold() {
      try {
        session ??= await open();
        if (holding) {
          if (Date.now() - checkedAt >= checkEveryMs) {
            await session.query("select 1"); // the session, and so the lock, is still there
            checkedAt = Date.now();
          }
          return true;
        }
        const { rows } = await session.query<{ locked: boolean }>("select pg_try_advisory_lock($1::bigint) as locked", [options.key]);
        if (!rows[0]?.locked) return false;
        await options.onTaken?.(session);
        holding = true;
        checkedAt = Date.now();
        logger.info(messages.taken);
        return true;
      } catch (err) {
        logger.warn({ err: err instanceof Error ? err.message : String(err) }, messages.failed);
        await drop();
        return false;
      }
    },
    release: () => drop(true),
  };
}

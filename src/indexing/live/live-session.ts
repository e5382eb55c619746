import pg from "pg";
import type { Logger } from "pino";

// The follower's own PostgreSQL session, outside the pool: it holds the advisory lock that makes
// one follower across replicas, and it LISTENs for the feed's wake-ups. A notification is only a
// wake-up (none arrives while the session is down, and none inside a transaction), so the
// follower also polls. The lock lasts exactly as long as the session: a follower that dies frees
// it at once, and a standby takes it at its next try.

/** pg_try_advisory_lock key of the live follower ("live-idx" in ASCII). */
const LOCK_KEY = "7811995136185940088";
export const FEED_CHANNEL = "goods_live";

export interface LiveSession {
  /** Whether this process follows now: keeps the lock it holds, or tries to take a free one. */
  hold(): Promise<boolean>;
  /** Gives the lock up (closes the session). */
  release(): Promise<void>;
}

export interface LiveSessionOptions {
  databaseUrl: string;
  logger: Logger;
  /** Called on every notification of the feed's channel. */
  onWake: () => void;
  /** How often a held lock's session is checked with a round trip. */
  checkEveryMs?: number;
}

export function createLiveSession({ databaseUrl, logger, onWake, checkEveryMs = 5_000 }: LiveSessionOptions): LiveSession {
  let session: pg.Client | undefined;
  let leading = false;
  let checkedAt = 0;

  async function drop(released = false): Promise<void> {
    const old = session;
    session = undefined;
    if (leading && released) logger.info("live follower released its lock");
    else if (leading) logger.warn("live follower lost its lock: its database session ended");
    leading = false;
    await old?.end().catch(() => undefined);
  }

  async function open(): Promise<pg.Client> {
    const client = new pg.Client({
      connectionString: databaseUrl,
      application_name: "indexing-live-follower",
      connectionTimeoutMillis: 10_000,
      // Without keep-alive a silently dropped session would look alive, and locked, for hours.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    });
    client.on("error", (err) => {
      logger.warn({ err: err.message }, "live follower session failed");
      if (session === client) void drop();
    });
    client.on("end", () => {
      if (session === client) void drop();
    });
    client.on("notification", (message) => {
      if (message.channel === FEED_CHANNEL) onWake();
    });
    await client.connect();
    return client;
  }

  return {
    async hold() {
      try {
        session ??= await open();
        if (leading) {
          if (Date.now() - checkedAt >= checkEveryMs) {
            await session.query("select 1");
            checkedAt = Date.now();
          }
          return leading;
        }
        const { rows } = await session.query<{ locked: boolean }>("select pg_try_advisory_lock($1::bigint) as locked", [LOCK_KEY]);
        if (!rows[0]?.locked) return false;
        await session.query(`listen ${FEED_CHANNEL}`);
        leading = true;
        checkedAt = Date.now();
        logger.info("live follower took the lock: this process applies the feed");
        return true;
      } catch (err) {
        logger.warn({ err: err instanceof Error ? err.message : String(err) }, "live follower lock check failed; not following this round");
        await drop();
        return false;
      }
    },
    release: () => drop(true),
  };
}

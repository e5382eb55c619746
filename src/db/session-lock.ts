import pg from "pg";
import type { Logger } from "pino";

// A PostgreSQL advisory lock held by a session of its own, a dedicated connection outside the
// pool: one holder across every process on the database (the GPU sync leader, the live indexing
// follower). The lock lasts exactly as long as that session, so a holder that dies or loses its
// connection frees it at once, and another process takes it at its next try. Advisory locks are
// scoped to the database, so one constant key serves every deployment.
//
// A holder whose host dies or whose network is cut sends nothing more, and PostgreSQL would keep
// its session, and the lock, until the server's TCP keep-alive gives up (about 2 h on OS
// defaults). So the session asks the server to drop it after `idleTimeoutMs` without a query
// (idle_session_timeout) and to probe the connection itself (tcp_keepalives_*), and the holder
// renews it with a round trip every `renewEveryMs`, each bounded by `queryTimeoutMs`: a holder
// cut off takes its lock for lost within renewEveryMs + queryTimeoutMs, before the server frees
// it for another process.

export interface SessionLock {
  /**
   * Whether this process holds the lock now: keeps the one it holds, or tries to take a free one.
   * Callers may ask at the same time: one attempt is in flight, and they all get its answer.
   */
  hold(): Promise<boolean>;
  /**
   * Whether this process still holds the lock at this instant, by a round trip on the lock's own
   * session (the lock lives exactly as long as that session); never tries to take it. Asked
   * before every action that spends or destroys, so that a holder whose lock lapsed mid-round
   * does nothing more. With `term`, only while it holds it in that term: a lock lost and taken
   * again since is another term, and a round begun in the first must not go on in the second.
   */
  confirm(term?: number): Promise<boolean>;
  /** The term of the lock as this process holds it now: it grows each time the lock is taken. */
  term(): number;
  /** Whether the lock is held as this process last knew it, without a round trip: for status and metrics. */
  held(): boolean;
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
  /** How often the held lock's session is renewed with a round trip, whatever the holder does (default 5 s). */
  renewEveryMs?: number;
  /** A query of the session unanswered after this long: the session, and the lock, are taken for lost (default 5 s). */
  queryTimeoutMs?: number;
  /** The server ends the holder's session after this long without a query, freeing the lock (default 30 s). */
  idleTimeoutMs?: number;
  /** Called once the lock is taken, on its session (a LISTEN). */
  onTaken?: (session: pg.Client) => Promise<void>;
  /** Called on every notification the session receives. */
  onNotification?: (message: pg.Notification) => void;
}

/** Server-side keep-alive of the session: a dead peer is found within 10 + 3 x 5 s of silence. */
const SERVER_KEEPALIVE = `set tcp_keepalives_idle = 10; set tcp_keepalives_interval = 5; set tcp_keepalives_count = 3`;

export function createSessionLock(options: SessionLockOptions): SessionLock {
  const { logger, messages, renewEveryMs = 5_000, queryTimeoutMs = 5_000, idleTimeoutMs = 30_000 } = options;
  let session: pg.Client | undefined;
  let holding = false;
  let term = 0;
  let renewal: NodeJS.Timeout | undefined;

  async function drop(released = false): Promise<void> {
    const old = session;
    session = undefined;
    if (holding && released) logger.info(messages.released);
    else if (holding) logger.warn(messages.lost);
    holding = false;
    clearInterval(renewal);
    renewal = undefined;
    // A session cut off never answers the goodbye: do not wait for it longer than a query.
    const ended = old?.end().catch(() => undefined);
    await Promise.race([ended, new Promise((resolve) => setTimeout(resolve, queryTimeoutMs).unref())]);
  }

  /** A round trip on the held session: keeps the server's idle clock from running out, and finds a session cut off. */
  function renewEvery(client: pg.Client): NodeJS.Timeout {
    let renewing = false;
    const timer = setInterval(() => {
      if (renewing || session !== client) return;
      renewing = true;
      client
        .query("select 1")
        .catch(async (err: unknown) => {
          logger.warn({ err: err instanceof Error ? err.message : String(err) }, messages.failed);
          if (session === client) await drop();
        })
        .finally(() => {
          renewing = false;
        });
    }, renewEveryMs);
    return timer.unref();
  }

  async function open(): Promise<pg.Client> {
    const client = new pg.Client({
      connectionString: options.connectionString,
      application_name: options.applicationName,
      connectionTimeoutMillis: 10_000,
      // Without keep-alive a silently dropped session would look alive, and locked, for hours.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      query_timeout: queryTimeoutMs,
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
    try {
      await client.connect();
      await client.query(SERVER_KEEPALIVE);
    } catch (err) {
      void client.end().catch(() => undefined);
      throw err;
    }
    return client;
  }

  /**
   * Only the holder's session may time out: a standby's idles between its tries. PostgreSQL
   * before 14 has no idle_session_timeout; its sessions rely on the keep-alive alone.
   */
  async function limitIdle(client: pg.Client): Promise<void> {
    try {
      await client.query(`set idle_session_timeout = ${Math.round(idleTimeoutMs)}`);
    } catch (err) {
      if ((err as { code?: string }).code !== "42704") throw err;
      logger.warn("this PostgreSQL has no idle_session_timeout: a lock holder cut off is found by TCP keep-alive only");
    }
  }

  async function tryHold(): Promise<boolean> {
    try {
      // Held: the renewals and the session's events keep `holding` true to the facts.
      if (holding) return true;
      session ??= await open();
      const { rows } = await session.query<{ locked: boolean }>("select pg_try_advisory_lock($1::bigint) as locked", [options.key]);
      if (!rows[0]?.locked) return false;
      await limitIdle(session);
      await options.onTaken?.(session);
      holding = true;
      term++;
      renewal = renewEvery(session);
      logger.info(messages.taken);
      return true;
    } catch (err) {
      logger.warn({ err: err instanceof Error ? err.message : String(err) }, messages.failed);
      await drop();
      return false;
    }
  }

  // Two attempts at once (a sync round and the endpoint timers, all in one tick after the
  // session dropped) would each open a session: the lock would be taken on one while the other
  // is renewed, and the first, orphaned, would keep it for good. One attempt is in flight.
  let attempt: Promise<boolean> | undefined;

  return {
    hold() {
      attempt ??= tryHold().finally(() => {
        attempt = undefined;
      });
      return attempt;
    },
    async confirm(inTerm?: number) {
      const held = session;
      const heldTerm = term;
      if (!holding || !held || (inTerm !== undefined && inTerm !== heldTerm)) return false;
      try {
        await held.query("select 1");
        return holding && session === held && term === heldTerm;
      } catch (err) {
        logger.warn({ err: err instanceof Error ? err.message : String(err) }, messages.failed);
        if (session === held) await drop();
        return false;
      }
    },
    held: () => holding,
    term: () => term,
    release: () => drop(true),
  };
}

import type { Logger } from "pino";
import { createSessionLock, type SessionLock } from "../../db/session-lock.js";

// The follower's own PostgreSQL session, outside the pool (src/db/session-lock.ts): it holds the
// advisory lock that makes one follower across replicas, and it LISTENs for the feed's wake-ups.
// A notification is only a wake-up (none arrives while the session is down, and none inside a
// transaction), so the follower also polls. The lock lasts exactly as long as the session: a
// follower that dies frees it at once, and a standby takes it at its next try.

/** pg_try_advisory_lock key of the live follower ("live-idx" in ASCII). */
export const LIVE_LOCK_KEY = "7811995136185940088";
const FEED_CHANNEL = "goods_live";

export type LiveSession = SessionLock;

export interface LiveSessionOptions {
  databaseUrl: string;
  logger: Logger;
  /** Called on every notification of the feed's channel. */
  onWake: () => void;
}

export function createLiveSession({ databaseUrl, logger, onWake }: LiveSessionOptions): LiveSession {
  return createSessionLock({
    connectionString: databaseUrl,
    key: LIVE_LOCK_KEY,
    applicationName: "indexing-live-follower",
    logger,
    messages: {
      taken: "live follower took the lock: this process applies the feed",
      released: "live follower released its lock",
      lost: "live follower lost its lock: its database session ended",
      failed: "live follower session failed; not following this round",
    },
    onTaken: async (session) => {
      await session.query(`listen ${FEED_CHANNEL}`);
    },
    onNotification: (message) => {
      if (message.channel === FEED_CHANNEL) onWake();
    },
  });
}

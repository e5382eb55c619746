import type { Knex } from "knex";
import type { Logger } from "pino";
import { measureBacklog, type FeedBacklog } from "./live-feed.js";

// The feed's backlog as this process last measured it (for metrics, which do no I/O), measured at
// most once a second, by the follower after its passes and by a standby while it waits: a standby
// whose leader has vanished still sees the backlog grow, so an alert can fire.

/** Oldest pending change older than this: live indexing has fallen behind (logged once). */
const BEHIND_MS = 5_000;
/** ...and has caught up again once the oldest is younger than this. */
const CAUGHT_UP_MS = 1_000;

export interface BacklogWatch {
  /** Measures, at most once a second; logs falling behind and catching up, once each. */
  observe(): Promise<void>;
  /** Measures now. */
  measure(): Promise<FeedBacklog>;
  last(): FeedBacklog;
}

export function createBacklogWatch(knex: Knex, logger: Logger): BacklogWatch {
  let backlog: FeedBacklog = { pendingProducts: 0, retryingProducts: 0, oldestPendingAgeMs: 0, appliedTotal: 0, lastAppliedAt: undefined };
  let behind = false;
  let measuredAt = 0;

  async function measure(): Promise<FeedBacklog> {
    backlog = await measureBacklog(knex);
    measuredAt = Date.now();
    return backlog;
  }

  return {
    async observe() {
      if (Date.now() - measuredAt < 1_000) return;
      await measure();
      const fields = { pending_products: backlog.pendingProducts, retrying_products: backlog.retryingProducts };
      if (!behind && backlog.oldestPendingAgeMs > BEHIND_MS) {
        behind = true;
        logger.warn({ ...fields, oldest_pending_age_ms: backlog.oldestPendingAgeMs }, "live indexing fell behind");
      } else if (behind && backlog.oldestPendingAgeMs < CAUGHT_UP_MS) {
        behind = false;
        logger.info(fields, "live indexing caught up");
      }
    },
    measure,
    last: () => backlog,
  };
}

import type { Knex } from "knex";
import type { Logger } from "pino";
import { databaseUrlOf } from "../../db/knex.js";
import { createSessionLock, type SessionLock } from "../../db/session-lock.js";

// One sync leader per database (SPEC.md section 2, "Request economy"): with several service
// processes on one database, only the holder of a PostgreSQL advisory lock runs the status sync
// and reconcile loop and the endpoint controller. The lock lives in a session of its own
// (src/db/session-lock.ts), so a leader that dies (or loses its connection) frees it at once, and
// another process takes it at its next round, within one interval.
//
// Leadership is this one object: every round gated on it asks hold() first, every action of a
// round that spends or destroys asks confirm() first, and status() says whether this process
// leads and when a round last ran here, for /readyz and /metrics: a leadership that silently
// stopped (no process leading, or a leader whose rounds no longer run) shows there.

/** pg_try_advisory_lock key of the GPU sync loop ("gpu-sync" in ASCII). */
export const SYNC_LEADER_LOCK_KEY = "7526466839954025";

export interface LeadershipStatus {
  /** This process holds the lock, as it last knew (no round trip). */
  leading: boolean;
  /** When a round gated on the leadership last started on this process; undefined: never. */
  lastRoundAt: Date | undefined;
}

export interface SyncLeader {
  /** "Do I lead now?", asked at the start of each round: keeps or takes the lock. A yes starts a round. */
  hold(): Promise<boolean>;
  /**
   * "Do I still lead?", asked before each action that spends or destroys: a round trip on the
   * lock's session. With `term` (from term() as the round began): on that very lease, not one
   * lost and taken again since.
   */
  confirm(term?: number): Promise<boolean>;
  /** The lease this process leads on now; it changes each time the lead is taken. */
  term(): number;
  /** Gives the leadership up. */
  release(): Promise<void>;
  status(): LeadershipStatus;
}

/**
 * Asked before each action of a control round that spends or destroys: false, and the round does
 * nothing more (SPEC.md section 2, "Control loops survive their database").
 */
export type StillLeads = () => Promise<boolean>;

/** For the actions taken outside a leader's round (a status read that syncs its record): not gated. */
export const ungated: StillLeads = async () => true;

/** The leadership over a session lock: records the rounds it lets run. */
export function leadershipOver(lock: SessionLock): SyncLeader {
  let lastRoundAt: Date | undefined;
  return {
    async hold() {
      const leads = await lock.hold();
      if (leads) lastRoundAt = new Date();
      return leads;
    },
    confirm: (term) => lock.confirm(term),
    term: () => lock.term(),
    release: () => lock.release(),
    status: () => ({ leading: lock.held(), lastRoundAt }),
  };
}

export function createSyncLeader(knex: Knex, logger: Logger): SyncLeader {
  return leadershipOver(
    createSessionLock({
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
    }),
  );
}

/** The leadership as /readyz shows it. */
export function leadershipJson(status: LeadershipStatus): { leading: boolean; last_round_at: string | null } {
  return { leading: status.leading, last_round_at: status.lastRoundAt?.toISOString() ?? null };
}

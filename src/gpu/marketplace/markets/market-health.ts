import { ConflictError, DomainError, InvalidInputError, MarketBlockedError, messageOf, NotFoundError } from "../../../errors.js";
import type { MarketHealth } from "../port.js";

// What each market's last calls said, for GET /api/gpu/markets and for auto-picks: a market
// whose call failed is `failing` until one succeeds; one that refused the account (a refused key,
// no balance: MarketBlockedError) is `blocked` until a create succeeds there, and meanwhile gets
// at most one create per probe interval. An answer about an offer (taken, unknown, refused as
// input) is the market working, not failing. The counts feed the per-market metrics. This is the
// one place that keeps a market's blocked state and its probe clock: an adapter reports only what
// its transport knows (rate limited, failing), and throws its refusals for this to see.

/**
 * The market refused the account itself: MarketBlockedError, or an adapter's refused key (which a
 * market alone answers as a configuration error naming its variable, MARKETPLACE_AUTH_REFUSED).
 */
export function refusesAccount(err: unknown): boolean {
  return err instanceof MarketBlockedError || (err instanceof DomainError && err.extra?.code === "MARKETPLACE_AUTH_REFUSED");
}

/** How often a blocked market is tried with a create, as a probe of whether it was unblocked. */
export const BLOCKED_PROBE_MS = 60_000;

export interface MarketCounts {
  calls: number;
  errors: number;
}

export interface HealthTracker {
  succeeded(market: string, what: "read" | "create"): void;
  failed(market: string, err: unknown): void;
  /** The market's state: its own report (rate limited, blocked) wins over what the calls showed. */
  health(market: string, reported?: MarketHealth): MarketHealth;
  /** Whether a create may go to the market now: not blocked, or blocked and its probe is due (then taken). */
  mayRent(market: string): boolean;
  /** Whether an auto-pick's search should ask the market: not blocked, or its probe is due. */
  mayOffer(market: string): boolean;
  counts(market: string): MarketCounts;
}

interface Seen {
  failing?: { error: string; since: Date };
  blocked?: { error: string; since: Date };
  probedAt?: number;
  counts: MarketCounts;
}

export function createHealthTracker(names: readonly string[], now: () => number = Date.now, probeMs = BLOCKED_PROBE_MS): HealthTracker {
  const seen = new Map<string, Seen>(names.map((name) => [name, { counts: { calls: 0, errors: 0 } }]));
  const of = (market: string) => seen.get(market)!;
  const probeDue = (s: Seen) => s.probedAt === undefined || now() - s.probedAt >= probeMs;
  return {
    succeeded(market, what) {
      const s = of(market);
      s.counts.calls++;
      s.failing = undefined;
      if (what === "create") s.blocked = undefined;
    },
    failed(market, err) {
      const s = of(market);
      s.counts.calls++;
      if (err instanceof ConflictError || err instanceof NotFoundError || err instanceof InvalidInputError) {
        s.failing = undefined;
        return;
      }
      s.counts.errors++;
      const error = messageOf(err);
      if (refusesAccount(err)) {
        // The refusal was the probe: the next create there waits a whole probe interval.
        if (!s.blocked) s.probedAt = now();
        s.blocked = { error, since: s.blocked?.since ?? new Date(now()) };
      }
      else s.failing = { error, since: s.failing?.since ?? new Date(now()) };
    },
    health(market, reported) {
      const s = of(market);
      if (s.blocked) return { state: "blocked", ...s.blocked };
      if (reported && reported.state !== "ok" && reported.state !== "blocked") return reported;
      if (s.failing) return { state: "failing", ...s.failing };
      return { state: "ok" };
    },
    mayRent(market) {
      const s = of(market);
      if (!s.blocked) return true;
      if (!probeDue(s)) return false;
      s.probedAt = now();
      return true;
    },
    mayOffer(market) {
      const s = of(market);
      return !s.blocked || probeDue(s);
    },
    counts: (market) => ({ ...of(market).counts }),
  };
}

import type { MarketHealth } from "../port.js";

// How RunPod has answered lately, as GET /api/gpu/markets shows it. `blocked` (a refused key, no
// balance) lasts until a create succeeds: auto-picks skip the market, and at most one create per
// probe interval goes through to find out whether it has changed (the others are refused at
// once). `rate_limited` lasts until the 429's Retry-After; `failing` until a call succeeds.

/** While blocked, one create per this interval goes through as a probe. */
export const PROBE_INTERVAL_MS = 60_000;

export interface RunpodHealth {
  health(): MarketHealth;
  succeeded(): void;
  failed(error: string): void;
  blocked(why: string): void;
  /** A create may go out: not blocked, or blocked and no probe in the last interval (this one is it). */
  takeCreateTurn(): boolean;
  /** A create succeeded: the account works again. */
  unblocked(): void;
}

export function createRunpodHealth(rateLimitedUntil: () => Date | undefined, now: () => number = () => Date.now()): RunpodHealth {
  let blocked: { error: string; since: Date } | undefined;
  let failing: { error: string; since: Date } | undefined;
  let lastProbe = 0;

  return {
    health() {
      if (blocked) return { state: "blocked", ...blocked };
      const until = rateLimitedUntil();
      if (until) return { state: "rate_limited", until };
      if (failing) return { state: "failing", ...failing };
      return { state: "ok" };
    },
    succeeded: () => void (failing = undefined),
    failed(error) {
      failing = { error, since: failing?.since ?? new Date(now()) };
    },
    blocked(why) {
      blocked = { error: why, since: blocked?.since ?? new Date(now()) };
      lastProbe = now();
    },
    takeCreateTurn() {
      if (!blocked) return true;
      if (now() - lastProbe < PROBE_INTERVAL_MS) return false;
      lastProbe = now();
      return true;
    },
    unblocked: () => void (blocked = undefined),
  };
}

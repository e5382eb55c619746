import type { MarketHealth } from "../port.js";

// How RunPod's transport has answered lately, as GET /api/gpu/markets shows it: `rate_limited`
// until the 429's Retry-After, `failing` until a call succeeds. Whether the account is blocked (a
// refused key, no balance) and when a blocked market is probed are kept in one place for every
// market (markets/market-health.ts), which sees the MarketBlockedError this adapter throws.

export interface RunpodHealth {
  health(): MarketHealth;
  succeeded(): void;
  failed(error: string): void;
}

export function createRunpodHealth(rateLimitedUntil: () => Date | undefined, now: () => number = () => Date.now()): RunpodHealth {
  let failing: { error: string; since: Date } | undefined;

  return {
    health() {
      const until = rateLimitedUntil();
      if (until) return { state: "rate_limited", until };
      if (failing) return { state: "failing", ...failing };
      return { state: "ok" };
    },
    succeeded: () => void (failing = undefined),
    failed(error) {
      failing = { error, since: failing?.since ?? new Date(now()) };
    },
  };
}

// One market's failures back off that market alone (SPEC.md section 2, "Several marketplaces",
// Endpoints): a launch that failed in a market leaves it out of the endpoint's next launches for
// the launch backoff's delay (10 s, doubling, to 10 min), while its other markets are tried at
// once; a launch rented there clears it. Held in this process's memory, per endpoint: a new
// leader starts with every market open, at the cost of one failed try.

export interface MarketBackoff {
  /** The markets of `allowed` a launch of the endpoint tries now: those not backing off; all of them when every one is. */
  usable(endpointId: string, allowed: readonly string[], now?: number): string[];
  /** A launch failed in the market; returns how long the market is now left out, ms. */
  failed(endpointId: string, market: string, now?: number): number;
  /** A launch was rented in the market: it is open again. */
  succeeded(endpointId: string, market: string): void;
}

/** `delayMs`: how long a market is left out after its n-th failure in a row (the launch backoff's). */
export function createMarketBackoff(delayMs: (failures: number) => number): MarketBackoff {
  const seen = new Map<string, { failures: number; until: number }>();
  const key = (endpointId: string, market: string) => `${endpointId}\u0000${market}`;
  return {
    usable(endpointId, allowed, now = Date.now()) {
      const open = allowed.filter((m) => (seen.get(key(endpointId, m))?.until ?? 0) <= now);
      return open.length > 0 ? open : [...allowed];
    },
    failed(endpointId, market, now = Date.now()) {
      const failures = (seen.get(key(endpointId, market))?.failures ?? 0) + 1;
      const delay = delayMs(failures);
      seen.set(key(endpointId, market), { failures, until: now + delay });
      return delay;
    },
    succeeded(endpointId, market) {
      seen.delete(key(endpointId, market));
    },
  };
}

// How long a market's calls have waited for its rate limit: a limiter's turn (vast.ai's minimum
// interval per endpoint, RunPod's spread quota) and a 429 waited out before the call went again.
// Read by the per-market metrics (gpu_market_rate_limit_waits_total and _wait_seconds_total).

import type { RateLimitWaits } from "../port.js";

export interface RateWaitCounter {
  /** A call waited this long for the rate limit, ms; a wait under a millisecond is no wait. */
  waited(ms: number): void;
  read(): RateLimitWaits;
}

export function createRateWaitCounter(): RateWaitCounter {
  const total = { count: 0, seconds: 0 };
  return {
    waited(ms) {
      if (!(ms >= 1)) return;
      total.count++;
      total.seconds += ms / 1000;
    },
    read: () => ({ ...total }),
  };
}

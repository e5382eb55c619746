import type { MarketOffer } from "../port.js";

// The simulated marketplace's interruptible machines (SPEC.md section 2): every offer can be
// rented as a bid at no less than its minimum bid, half its on-demand price, and a bid instance is
// preempted at random at a rate per instance-hour (SIM_PREEMPT_PER_HOUR), or when a test or bench
// says so. The simulated market prices no storage apart, so a bid costs its bid.

/** The minimum bid as a share of the on-demand price. */
export const MIN_BID_SHARE = 0.5;

export function minBidOf(offer: MarketOffer): number {
  return Math.round(offer.dphTotal * MIN_BID_SHARE * 10_000) / 10_000;
}

/** The offer as the bid market shows it: priced at its minimum bid. */
export function asBidOffer(offer: MarketOffer): MarketOffer {
  const minBid = minBidOf(offer);
  return { ...offer, minBid, dphTotal: minBid };
}

/**
 * When a bid instance alive from `from` (epoch ms) is preempted: preemptions arrive as a Poisson
 * process of `perHour` per instance-hour, so the wait is exponential. Undefined: never (rate 0).
 * `random` is uniform in [0, 1), injectable so that tests choose the moment.
 */
export function preemptionAt(from: number, perHour: number, random: () => number): number | undefined {
  if (!(perHour > 0)) return undefined;
  const hours = -Math.log(1 - random()) / perHour;
  return from + Math.round(hours * 3_600_000);
}

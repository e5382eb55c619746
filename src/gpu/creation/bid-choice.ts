import { bidCostPerHour, type MarketOffer } from "../marketplace/port.js";

// Whether an interruptible creation bids or rents on-demand, and on which machines first. Pure:
// the creation searches the bid market and the on-demand market, keeps what fits the template in
// each (offer-choice.ts), and asks here. SPEC.md section 2: the bid is the offer's minimum bid x
// (1 + bid_margin), billed with the offer's storage; never a bid that reaches the price of an
// on-demand offer that fits: then the creation rents on-demand.

/** An offer a creation may rent, and the bid to rent it at ($/h for the machine, storage excluded); no bid: on-demand. */
export interface Candidate extends MarketOffer {
  bidPerHour?: number;
}

const round6 = (value: number) => Math.round(value * 1_000_000) / 1_000_000;

/** The bid on an offer of the bid market: its minimum bid x (1 + margin), rounded up to a hundredth of a cent per hour. */
export function bidOn(offer: Pick<MarketOffer, "minBid">, bidMargin: number): number | undefined {
  if (offer.minBid === undefined) return undefined;
  return Math.ceil(offer.minBid * (1 + bidMargin) * 10_000) / 10_000;
}

/** Offers of the bid market as candidates at their bid: dphTotal becomes what the bid is billed (bid plus storage). */
export function asBids(offers: readonly MarketOffer[], bidMargin: number): Candidate[] {
  return offers.flatMap((offer) => {
    const bid = bidOn(offer, bidMargin);
    return bid === undefined ? [] : [{ ...offer, bidPerHour: bid, dphTotal: round6(bidCostPerHour(offer, bid)) }];
  });
}

/**
 * The candidates of an interruptible creation, best first: the bids (already priced by asBids and
 * fitted to the template) that cost less than the cheapest fitting on-demand offer, cheapest
 * first; when there is none, the on-demand offers. Either list may be empty.
 */
export function bidOrOnDemand(bids: readonly Candidate[], onDemand: readonly MarketOffer[]): Candidate[] {
  const cheapestOnDemand = Math.min(...onDemand.map((o) => o.dphTotal));
  const worthIt = bids.filter((b) => b.bidPerHour !== undefined && b.dphTotal < cheapestOnDemand);
  return worthIt.length > 0 ? [...worthIt].sort((a, b) => a.dphTotal - b.dphTotal || a.id.localeCompare(b.id)) : [...onDemand];
}

/**
 * Candidates on machines not in `avoid` first (in their order), then the rest: an endpoint's
 * replicas go to distinct machines while offers on other machines fit, so that one outbid
 * machine does not take several at once. An offer whose machine is unknown counts as another.
 */
export function spreadOver<T extends MarketOffer>(candidates: readonly T[], avoid: readonly string[] | undefined): T[] {
  if (!avoid || avoid.length === 0) return [...candidates];
  const avoided = new Set(avoid);
  const elsewhere = candidates.filter((c) => c.machineId === undefined || !avoided.has(c.machineId));
  return [...elsewhere, ...candidates.filter((c) => !elsewhere.includes(c))];
}

import { bidCostPerHour, type MarketOffer } from "../marketplace/port.js";

// What a bid costs, and on which machines a creation tries first. Pure. SPEC.md section 2: the
// bid is the offer's minimum bid x (1 + bid_margin), billed with the offer's storage; whether a
// bid is made at all, or on-demand rented instead, is slot-offers.ts's choice.

/**
 * How a machine is rented, whatever market it is on: as an interruptible bid, or on-demand. A
 * market rents one kind or both (vast.ai both, RunPod on-demand only): a kind is not a market.
 */
export type RentalKind = "bid" | "on-demand";

/** An offer a creation may rent, and the bid to rent it at ($/h for the machine, storage excluded); no bid: on-demand. */
export interface Candidate extends MarketOffer {
  bidPerHour?: number;
}

export function rentalKindOf(candidate: Pick<Candidate, "bidPerHour">): RentalKind {
  return candidate.bidPerHour === undefined ? "on-demand" : "bid";
}

const round6 = (value: number) => Math.round(value * 1_000_000) / 1_000_000;

/** The bid on an offer searched as a bid (it has its minimum bid): its minimum bid x (1 + margin), rounded up to a hundredth of a cent per hour. */
export function bidOn(offer: Pick<MarketOffer, "minBid">, bidMargin: number): number | undefined {
  if (offer.minBid === undefined) return undefined;
  return Math.ceil(offer.minBid * (1 + bidMargin) * 10_000) / 10_000;
}

/** Offers searched as bids, as candidates at their bid: dphTotal becomes what the bid is billed (bid plus storage). */
export function asBids(offers: readonly MarketOffer[], bidMargin: number): Candidate[] {
  return offers.flatMap((offer) => {
    const bid = bidOn(offer, bidMargin);
    return bid === undefined ? [] : [{ ...offer, bidPerHour: bid, dphTotal: round6(bidCostPerHour(offer, bid)) }];
  });
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

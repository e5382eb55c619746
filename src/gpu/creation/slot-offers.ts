import type { MarketOffer } from "../marketplace/port.js";
import type { Candidate } from "./bid-choice.js";

// What an interruptible creation rents (SPEC.md section 2, "Interruptible replicas with on-demand
// fallback"), chosen once over what fits in both markets. On every launch a bid is compared with
// the on-demand offers that fit, whether on-demand may be rented or not: a bid that would reach
// their price is never made. The way back from a fallback also names the fallback's cost, which a
// bid must stay under. Pure: the creation searches each market once and fits the offers
// (offer-choice.ts); bids come priced (bid-choice.ts).

export interface SlotMarkets {
  /** The bid market's offers that fit, priced at their bids: dphTotal is what the bid bills (bid plus storage). */
  bids: readonly Candidate[];
  /** The on-demand market's offers that fit. */
  onDemand: readonly MarketOffer[];
  /** Whether an on-demand offer may be rented (false: a bid or nothing). */
  onDemandAllowed: boolean;
  /** $/h a bid must cost strictly less than: the billed cost of the fallback it would replace. */
  cheaperThan?: number;
}

/** Why nothing may be rented. */
export type NothingToRent =
  /** Neither market has an offer that fits. */
  | { kind: "nothing-fits" }
  /** On-demand may not be rented and no bid fits. */
  | { kind: "no-bid-fits" }
  /** Every fitting bid costs at least `ceiling` $/h: the cheapest fitting on-demand offer's price, or the fallback's cost. */
  | { kind: "bids-too-dear"; ceiling: number; of: "on-demand" | "fallback"; cheapestBid: number };

export type SlotChoice = { candidates: Candidate[]; none?: undefined } | { candidates: []; none: NothingToRent };

/**
 * The offers to rent, best first: the bids that cost less than the cheapest fitting on-demand
 * offer and than `cheaperThan`, cheapest first; else, when on-demand may be rented, the on-demand
 * offers (in their order); else none, and why. With no fitting on-demand offer and no
 * `cheaperThan`, every fitting bid qualifies (the template's price cap already bounds it).
 */
export function slotOffers({ bids, onDemand, onDemandAllowed, cheaperThan }: SlotMarkets): SlotChoice {
  const onDemandPrice = Math.min(...onDemand.map((o) => o.dphTotal));
  const fallbackCost = cheaperThan ?? Infinity;
  const ceiling = Math.min(onDemandPrice, fallbackCost);
  const worthIt = bids.filter((b) => b.dphTotal < ceiling);
  if (worthIt.length > 0) return { candidates: [...worthIt].sort((a, b) => a.dphTotal - b.dphTotal || a.id.localeCompare(b.id)) };
  if (onDemandAllowed && onDemand.length > 0) return { candidates: [...onDemand] };
  if (bids.length === 0) return { candidates: [], none: { kind: onDemand.length > 0 ? "no-bid-fits" : "nothing-fits" } };
  const cheapestBid = Math.min(...bids.map((b) => b.dphTotal));
  return { candidates: [], none: { kind: "bids-too-dear", ceiling, of: onDemandPrice <= fallbackCost ? "on-demand" : "fallback", cheapestBid } };
}

/** Why nothing may be rented, as the end of a sentence ("... : no bid costs less than the on-demand $0.6/h ..."). */
export function nothingToRentText(none: NothingToRent): string {
  switch (none.kind) {
    case "nothing-fits":
      return "no offer fits in either market";
    case "no-bid-fits":
      return "no offer of the bid market fits, and this launch may not rent on-demand";
    case "bids-too-dear": {
      const whose = none.of === "on-demand" ? "the on-demand" : "the fallback's";
      return `no bid costs less than ${whose} $${none.ceiling}/h (the cheapest fitting bid: $${none.cheapestBid}/h)`;
    }
  }
}

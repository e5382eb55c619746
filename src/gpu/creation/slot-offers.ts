import type { MarketOffer } from "../marketplace/port.js";
import type { Candidate, RentalKind } from "./bid-choice.js";

// What an interruptible creation rents (SPEC.md section 2, "Interruptible replicas with on-demand
// fallback"), chosen once over what fits of both rental kinds (bid and on-demand, in any market:
// a kind is not a market; bid-choice.ts's RentalKind). On every launch a bid is compared with
// the on-demand offers that fit, whether on-demand may be rented or not: a bid that would reach
// their price is never made. The way back from a fallback also names the cost of the machine it
// replaces: a bid takes its place only when it saves something worth a move (it costs at most 90%
// of it). Pure: the creation searches each market once and fits the offers (offer-choice.ts);
// bids come priced (bid-choice.ts). With an endpoint's capacity.spread_markets the offers are
// also spread over markets (spreadOverMarkets): any launch, on-demand or bid, goes first to the
// market, among those with a fitting offer within 25% of the cheapest, that holds the fewest of the
// endpoint's replicas, so that one market's outage takes at most its share of them.

/** A bid replaces an on-demand machine only when it costs at most this share of it (SPEC.md: at most 90%). */
export const MOVE_PRICE_SHARE = 0.9;

export interface OffersByKind {
  /** The offers that fit as bids, in the markets that rent bids, priced at their bids: dphTotal is what the bid bills (bid plus storage). */
  bids: readonly Candidate[];
  /** The offers that fit on-demand, in any market. */
  onDemand: readonly MarketOffer[];
  /** Whether an on-demand offer may be rented (false: a bid or nothing). */
  onDemandAllowed: boolean;
  /** $/h billed by the on-demand machine a bid would replace (a fallback): the bid must cost at most MOVE_PRICE_SHARE of it. */
  replacing?: number;
  /** With spread_markets: the markets the endpoint's other replicas are rented on, one entry each. */
  replicaMarkets?: readonly string[];
}

/** Why nothing may be rented. */
export type NothingToRent =
  /** No offer of either rental kind fits. */
  | { kind: "nothing-fits" }
  /** On-demand may not be rented and no bid fits. */
  | { kind: "no-bid-fits" }
  /** Every fitting bid costs at least the cheapest fitting on-demand offer's price `ceiling`. */
  | { kind: "bids-too-dear"; of: Extract<RentalKind, "on-demand">; ceiling: number; cheapestBid: number }
  /** Every fitting bid costs more than `ceiling`, MOVE_PRICE_SHARE of the `replacing` machine's cost. */
  | { kind: "bids-too-dear"; of: "replaced"; ceiling: number; replacing: number; cheapestBid: number };

export type SlotChoice = { candidates: Candidate[]; none?: undefined } | { candidates: []; none: NothingToRent };

const round6 = (value: number) => Math.round(value * 1_000_000) / 1_000_000;

/**
 * The offers to rent, best first: the bids that cost less than the cheapest fitting on-demand
 * offer and at most MOVE_PRICE_SHARE of `replacing`, cheapest first; else, when on-demand may be
 * rented, the on-demand offers (in their order); else none, and why. With no fitting on-demand
 * offer and nothing replaced, every fitting bid qualifies (the template's price cap already bounds it).
 */
export function slotOffers({ bids, onDemand, onDemandAllowed, replacing, replicaMarkets }: OffersByKind): SlotChoice {
  const onDemandPrice = Math.min(...onDemand.map((o) => o.dphTotal));
  const moveCeiling = replacing === undefined ? Infinity : round6(replacing * MOVE_PRICE_SHARE);
  const worthIt = bids.filter((b) => b.dphTotal < onDemandPrice && b.dphTotal <= moveCeiling);
  const spread = <T extends MarketOffer>(offers: T[]) => (replicaMarkets ? spreadOverMarkets(offers, replicaMarkets) : offers);
  if (worthIt.length > 0) return { candidates: spread([...worthIt].sort((a, b) => a.dphTotal - b.dphTotal || a.id.localeCompare(b.id))) };
  if (onDemandAllowed && onDemand.length > 0) return { candidates: spread([...onDemand]) };
  if (bids.length === 0) return { candidates: [], none: { kind: onDemand.length > 0 ? "no-bid-fits" : "nothing-fits" } };
  const cheapestBid = Math.min(...bids.map((b) => b.dphTotal));
  // The bar the cheapest bid missed: the on-demand price unless it passes that one.
  if (replacing !== undefined && cheapestBid < onDemandPrice) {
    return { candidates: [], none: { kind: "bids-too-dear", of: "replaced", ceiling: moveCeiling, replacing, cheapestBid } };
  }
  return { candidates: [], none: { kind: "bids-too-dear", of: "on-demand", ceiling: onDemandPrice, cheapestBid } };
}

/** Offers count as close in price for a spread when they cost at most this share of the cheapest (SPEC.md: within 25%). */
export const SPREAD_PRICE_SHARE = 1.25;

/**
 * The offers (best first) reordered to spread an endpoint's replicas over markets: of the markets
 * with an offer within SPREAD_PRICE_SHARE of the cheapest, the one holding the fewest of
 * `replicaMarkets` (on a tie, the one with the cheapest such offer) has its close offers first, in
 * their order; the rest follow as they were. With fewer than two such markets, unchanged.
 */
export function spreadOverMarkets<T extends MarketOffer>(offers: readonly T[], replicaMarkets: readonly string[]): T[] {
  if (offers.length === 0) return [];
  const ceiling = round6(Math.min(...offers.map((o) => o.dphTotal)) * SPREAD_PRICE_SHARE);
  const close = offers.filter((o) => o.market !== undefined && o.dphTotal <= ceiling);
  const markets = [...new Set(close.map((o) => o.market!))];
  if (markets.length < 2) return [...offers];
  const held = (market: string) => replicaMarkets.filter((m) => m === market).length;
  const cheapestIn = (market: string) => Math.min(...close.filter((o) => o.market === market).map((o) => o.dphTotal));
  const [emptiest] = [...markets].sort((a, b) => held(a) - held(b) || cheapestIn(a) - cheapestIn(b) || a.localeCompare(b));
  const first = close.filter((o) => o.market === emptiest);
  return [...first, ...offers.filter((o) => !first.includes(o))];
}

/** Why nothing may be rented, as the end of a sentence ("... : no bid costs less than the on-demand $0.6/h ..."). */
export function nothingToRentText(none: NothingToRent): string {
  switch (none.kind) {
    case "nothing-fits":
      return "no offer fits of either rental kind (bid or on-demand)";
    case "no-bid-fits":
      return "no offer fits as a bid, and this launch may not rent on-demand";
    case "bids-too-dear":
      if (none.of === "on-demand") return `no bid costs less than the on-demand $${none.ceiling}/h (the cheapest fitting bid: $${none.cheapestBid}/h)`;
      return (
        `no bid costs $${none.ceiling}/h or less, ${Math.round(MOVE_PRICE_SHARE * 100)}% of the $${none.replacing}/h machine it would replace ` +
        `(the cheapest fitting bid: $${none.cheapestBid}/h)`
      );
  }
}

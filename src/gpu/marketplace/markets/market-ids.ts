import { excerpt, InvalidInputError, UnavailableError } from "../../../errors.js";

// Ids across several markets: with more than one configured, an offer's or instance's id is
// `<market>:<the market's own id>`, so that ids never collide and each call finds its market.
// With one market ids stay the market's own, as they always were.

export interface MarketIds {
  /** The id callers see for a market's own id. */
  qualify(market: string, id: string): string;
  /** The market and its own id of an offer id; InvalidInputError naming `offer_id` when no configured market has it. */
  ofOffer(id: string): { market: string; id: string };
  /**
   * The market and its own id of an instance id; an id without a market's prefix (a record from
   * before several markets) belongs to the first. An id of a market MARKETPLACE no longer names
   * is UnavailableError: its machine may still bill there, and no other market may call it gone.
   */
  ofInstance(id: string): { market: string; id: string };
}

/** `names`: the configured markets, in order; `known`: every market name there is (MARKETPLACE's choices). */
export function createMarketIds(names: readonly string[], known: readonly string[] = names): MarketIds {
  const first = names[0]!;
  const split = (id: string) => {
    const at = id.indexOf(":");
    const market = at > 0 ? id.slice(0, at) : undefined;
    return market !== undefined && names.includes(market) ? { market, id: id.slice(at + 1) } : undefined;
  };
  const ofInstance = (id: string) => {
    const found = split(id);
    if (found) return found;
    const prefix = id.slice(0, Math.max(0, id.indexOf(":")));
    if (known.includes(prefix)) throw new UnavailableError(`Instance '${excerpt(id)}' is rented on the market '${prefix}', which MARKETPLACE does not name now`);
    return { market: first, id };
  };
  if (names.length === 1) {
    return { qualify: (_market, id) => id, ofOffer: (id) => ({ market: first, id }), ofInstance };
  }
  return {
    qualify: (market, id) => `${market}:${id}`,
    ofOffer(id) {
      const found = split(id);
      if (found) return found;
      throw new InvalidInputError(`offer_id '${excerpt(id)}' names no configured market: offer ids are <market>:<id> with market one of ${names.join(", ")}`, {
        extra: { field: "offer_id" },
      });
    },
    ofInstance,
  };
}

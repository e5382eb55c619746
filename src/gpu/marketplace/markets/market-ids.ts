import { excerpt, InvalidInputError, UnavailableError } from "../../../errors.js";
import type { MarketInstance } from "../port.js";

// Ids across several markets. An offer id is `<market>:<the market's own id>` when more than one
// market is configured (what `offer_id` takes), and the market's own id with one, as it always was.
// An instance id behind the composite is always `<market>:<own id>`: the record stores the market
// and the own id apart (instance-store.ts), and every call is sent by the market it names, never
// by the position of a market in MARKETPLACE. Callers of the API never see these ids: theirs is
// the record's instance_id.

export interface MarketIds {
  /** The offer id callers see for a market's own offer id. */
  qualify(market: string, id: string): string;
  /** The market and its own id of an offer id; InvalidInputError naming `offer_id` when no configured market has it. */
  ofOffer(id: string): { market: string; id: string };
  /**
   * The market and its own id of an instance id. An id of a market MARKETPLACE no longer names is
   * UnavailableError: its machine may still bill there, and no other market may call it gone. A
   * bare id (a record written with one market) belongs to the one configured; with several it
   * names no market and is refused, never sent to the first.
   */
  ofInstance(id: string): { market: string; id: string };
}

/** The composite's id of a market's instance. */
export function instanceRef(market: string, id: string): string {
  return `${market}:${id}`;
}

/** The market's own id of an instance the composite answered (its id carries the market); a bare adapter's id as it is. */
export function ownInstanceId(instance: Pick<MarketInstance, "id" | "market">): string {
  const prefix = instance.market === undefined ? undefined : `${instance.market}:`;
  return prefix !== undefined && instance.id.startsWith(prefix) ? instance.id.slice(prefix.length) : instance.id;
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
    if (names.length > 1) throw new UnavailableError(`Instance '${excerpt(id)}' names no market; with several markets configured it is sent to none`);
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

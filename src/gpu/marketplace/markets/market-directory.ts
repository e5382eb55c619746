import { messageOf } from "../../../errors.js";
import type { MarketDirectory, MarketListing, Marketplace } from "../port.js";

// The markets behind a Marketplace: the composite's own directory, or, for a bare adapter (as
// tests build them), that adapter as the one market, named BARE_MARKET.

export const BARE_MARKET = "marketplace";

export function directoryOf(marketplace: Marketplace): MarketDirectory {
  if (marketplace.markets) return marketplace.markets;
  const one = async <T>(list: () => Promise<T[]>): Promise<MarketListing<T>[]> => {
    try {
      return [{ market: BARE_MARKET, ok: true, items: await list() }];
    } catch (err) {
      return [{ market: BARE_MARKET, ok: false, items: [], error: messageOf(err), cause: err }];
    }
  };
  return {
    names: [BARE_MARKET],
    listOffersEach: (signal) => one(() => marketplace.listOffers(signal)),
    listInstancesEach: (labelPrefix, signal) => one(() => marketplace.listInstances(labelPrefix, signal)),
    states: () => [
      {
        market: BARE_MARKET,
        health: marketplace.health?.() ?? { state: "ok" },
        interruptible: marketplace.interruptible === true,
        rateLimitWaits: marketplace.rateLimitWaits?.(),
      },
    ],
  };
}

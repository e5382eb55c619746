import pino from "pino";
import { describe, expect, it } from "vitest";
import { MarketBlockedError, OperationFailedError } from "../../../../src/errors.js";
import { createSeveralMarkets } from "../../../../src/gpu/marketplace/markets/several-markets.js";
import type { Marketplace, MarketOffer } from "../../../../src/gpu/marketplace/port.js";

// The composite's rule for blocked markets, on markets whose answers the test sets (the emulators'
// version of it: one-blocked-market.test.ts): a pick whose every allowed market refuses the account
// answers that refusal; a blocked bid market beside an open one leaves a bid search empty, so that
// an interruptible slot can still fall back to on-demand in the open market.

function offer(id: string, dphTotal: number): MarketOffer {
  return { id, gpuName: "RTX 4090", numGpus: 1, gpuRam: 24, dphTotal, rentable: true, location: "" };
}

/** A market that offers `offers` and refuses every create with `refusal`. */
function refusingMarket(offers: MarketOffer[], refusal: Error, interruptible = false): Marketplace {
  return {
    interruptible,
    listOffers: async () => offers,
    searchOffers: async () => offers,
    createInstance: async () => {
      throw refusal;
    },
    getInstance: async () => undefined,
    listInstances: async () => [],
    destroyInstance: async () => {},
    close: async () => {},
  };
}

const logger = pino({ level: "silent" });
const blocking = (why: string) => new MarketBlockedError(why);
const refusedKey = () => new OperationFailedError("the key was refused; check THE_KEY", { extra: { code: "MARKETPLACE_AUTH_REFUSED" } });

describe("a blocked market in an automatic pick", () => {
  it("alone: its refusal as it gave it, on every later search and create, never an empty answer", async () => {
    const refusal = refusedKey();
    const market = createSeveralMarkets({ markets: [{ name: "vastai", marketplace: refusingMarket([offer("1", 0.3)], refusal) }], timeoutMs: 1000, logger });
    await expect(market.createInstance({ offerId: "1", label: "gpu-1", image: "x", startCommand: "", env: {} })).rejects.toBe(refusal);
    await expect(market.searchOffers({ rentable: true })).rejects.toBe(refusal);
    await expect(market.createInstance({ offerId: "1", label: "gpu-2", image: "x", startCommand: "", env: {} })).rejects.toBe(refusal);
  });

  it("beside an open market: a bid search is empty rather than refused, an on-demand search has the open market's offers", async () => {
    const market = createSeveralMarkets({
      markets: [
        { name: "vastai", marketplace: refusingMarket([offer("1", 0.2)], blocking("no balance"), true) },
        { name: "runpod", marketplace: refusingMarket([offer("2", 0.4)], blocking("unused")) },
      ],
      timeoutMs: 1000,
      logger,
    });
    await expect(market.createInstance({ offerId: "vastai:1", label: "gpu-1", image: "x", startCommand: "", env: {} })).rejects.toThrow(MarketBlockedError);
    expect(await market.searchOffers({ interruptible: true })).toEqual([]);
    expect((await market.searchOffers({})).map((o) => o.id)).toEqual(["runpod:2"]);
    // A pick narrowed to the blocked market (an endpoint's capacity.markets) hears why.
    await expect(market.searchOffers({ markets: ["vastai"] })).rejects.toThrow(/The market 'vastai' refuses this account \(.*no balance\)/);
  });
});

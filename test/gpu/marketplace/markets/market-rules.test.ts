import { describe, expect, it } from "vitest";
import { ConflictError, InvalidInputError, MarketBlockedError, OperationFailedError, UnavailableError } from "../../../../src/errors.js";
import { BLOCKED_PROBE_MS, createHealthTracker } from "../../../../src/gpu/marketplace/markets/market-health.js";
import { createMarketIds, instanceRef, ownInstanceId } from "../../../../src/gpu/marketplace/markets/market-ids.js";
import { mergedOffers } from "../../../../src/gpu/marketplace/markets/merged-offers.js";
import type { MarketOffer } from "../../../../src/gpu/marketplace/port.js";

// The pure rules of several markets: ids, each market's health from its calls, and the merge of
// their answers to one search.

describe("offer and instance ids over markets", () => {
  it("keeps a market's own ids when it is the only one", () => {
    const ids = createMarketIds(["vastai"]);
    expect(ids.qualify("vastai", "4200001")).toBe("4200001");
    expect(ids.ofOffer("4200001")).toEqual({ market: "vastai", id: "4200001" });
    expect(ids.ofInstance("77")).toEqual({ market: "vastai", id: "77" });
  });

  it("prefixes ids with their market when there are several, and splits them back", () => {
    const ids = createMarketIds(["vastai", "simulated"]);
    expect(ids.qualify("simulated", "12")).toBe("simulated:12");
    expect(ids.ofOffer("simulated:12")).toEqual({ market: "simulated", id: "12" });
    expect(ids.ofOffer("vastai:a:b")).toEqual({ market: "vastai", id: "a:b" });
    expect(ids.ofInstance("simulated:5")).toEqual({ market: "simulated", id: "5" });
    // A bare id names no market: with several it is sent to none, never to the first.
    expect(() => ids.ofInstance("5")).toThrow(UnavailableError);
    expect(() => createMarketIds(["runpod", "vastai"]).ofInstance("4200001")).toThrow(/names no market/);
  });

  it("names an instance by its market and its own id, whatever the number of markets", () => {
    expect(instanceRef("vastai", "4200001")).toBe("vastai:4200001");
    expect(ownInstanceId({ id: "vastai:4200001", market: "vastai" })).toBe("4200001");
    expect(ownInstanceId({ id: "4200001", market: undefined })).toBe("4200001");
    expect(createMarketIds(["vastai"]).ofInstance(instanceRef("vastai", "4200001"))).toEqual({ market: "vastai", id: "4200001" });
  });

  it("never sends an instance of a market MARKETPLACE no longer names to another, and takes its own prefix back when alone", () => {
    const known = ["simulated", "remote", "vastai", "runpod"];
    const several = createMarketIds(["vastai", "simulated"], known);
    expect(() => several.ofInstance("runpod:pod-1")).toThrow(UnavailableError);
    expect(() => several.ofInstance("runpod:pod-1")).toThrow(/market 'runpod', which MARKETPLACE does not name now/);
    const alone = createMarketIds(["vastai"], known);
    expect(alone.ofInstance("vastai:77")).toEqual({ market: "vastai", id: "77" });
    expect(() => alone.ofInstance("simulated:5")).toThrow(UnavailableError);
    expect(alone.ofInstance("host:5")).toEqual({ market: "vastai", id: "host:5" });
  });

  it.each(["12", "runpod:1", ":1", "aws:x"])("refuses offer_id %s with a 400 naming the field", (id) => {
    const ids = createMarketIds(["vastai", "simulated"]);
    expect(() => ids.ofOffer(id)).toThrow(InvalidInputError);
    try {
      ids.ofOffer(id);
    } catch (err) {
      expect((err as InvalidInputError).extra).toEqual({ field: "offer_id" });
    }
  });
});

describe("a market's health", () => {
  const at = (ms: number) => () => ms;

  it("is failing from its first failed call until one succeeds; an answer about an offer is no failure", () => {
    let now = 1_000;
    const health = createHealthTracker(["vastai"], () => now);
    health.failed("vastai", new UnavailableError("down"));
    now = 2_000;
    health.failed("vastai", new UnavailableError("still down"));
    expect(health.health("vastai")).toEqual({ state: "failing", error: "still down", since: new Date(1_000) });
    health.failed("vastai", new ConflictError("taken"));
    expect(health.health("vastai")).toEqual({ state: "ok" });
    expect(health.counts("vastai")).toEqual({ calls: 3, errors: 2 });
  });

  it("is blocked by a refused account until a create succeeds, with one create per probe interval meanwhile", () => {
    let now = 0;
    const health = createHealthTracker(["vastai"], () => now);
    health.failed("vastai", new MarketBlockedError("no balance"));
    expect(health.health("vastai")).toMatchObject({ state: "blocked", error: "no balance" });
    expect(health.mayOffer("vastai")).toBe(false);
    expect(health.mayRent("vastai")).toBe(false);
    now = BLOCKED_PROBE_MS - 1;
    expect(health.mayRent("vastai")).toBe(false);
    now = BLOCKED_PROBE_MS;
    expect(health.mayOffer("vastai")).toBe(true);
    expect(health.mayRent("vastai")).toBe(true); // the probe
    expect(health.mayOffer("vastai")).toBe(false);
    expect(health.mayRent("vastai")).toBe(false);
    health.failed("vastai", new MarketBlockedError("no balance"));
    now = 2 * BLOCKED_PROBE_MS - 1;
    expect(health.mayRent("vastai")).toBe(false);
    now = 2 * BLOCKED_PROBE_MS;
    health.succeeded("vastai", "read");
    expect(health.health("vastai").state).toBe("blocked");
    health.succeeded("vastai", "create");
    expect(health.health("vastai")).toEqual({ state: "ok" });
    expect(health.mayRent("vastai")).toBe(true);
  });

  it("takes a refused key for a blocked account, and the adapter's own report (rate limited) over a clean record, never its word for blocked", () => {
    const health = createHealthTracker(["vastai", "simulated"], at(0));
    health.failed("vastai", new OperationFailedError("vast.ai refused the API key", { extra: { code: "MARKETPLACE_AUTH_REFUSED" } }));
    expect(health.health("vastai").state).toBe("blocked");
    expect(health.mayRent("vastai")).toBe(false);
    const until = new Date(5_000);
    expect(health.health("simulated", { state: "rate_limited", until })).toEqual({ state: "rate_limited", until });
    // The blocked state and its probe clock are the tracker's alone: what it has not seen does not block.
    expect(health.health("simulated", { state: "blocked", error: "402" })).toEqual({ state: "ok" });
    expect(health.mayRent("simulated")).toBe(true);
    expect(health.mayRent("simulated")).toBe(true);
  });
});

describe("the merge of several markets' offers", () => {
  const offer = (id: string, dphTotal: number, gpuRam = 24, numGpus = 1): MarketOffer => ({ id, gpuName: "RTX 4090", numGpus, gpuRam, dphTotal, rentable: true, location: "" });

  it("orders by the search's order over every market, ties by price then id, up to the limit", () => {
    const offers = [offer("vastai:2", 0.5), offer("simulated:1", 0.3), offer("vastai:1", 0.3), offer("simulated:9", 0.9, 80, 2)];
    expect(mergedOffers(offers).map((o) => o.id)).toEqual(["simulated:1", "vastai:1", "vastai:2", "simulated:9"]);
    expect(mergedOffers(offers, "gpu_ram", 2).map((o) => o.id)).toEqual(["simulated:9", "simulated:1"]);
    expect(mergedOffers(offers, "price_per_gpu").map((o) => o.id)).toEqual(["simulated:1", "vastai:1", "simulated:9", "vastai:2"]);
  });
});

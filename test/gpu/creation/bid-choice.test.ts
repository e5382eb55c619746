import { describe, expect, it } from "vitest";
import { asBids, bidOn, bidOrOnDemand, spreadOver } from "../../../src/gpu/creation/bid-choice.js";
import type { MarketOffer } from "../../../src/gpu/marketplace/port.js";

// Bid or on-demand, as SPEC.md section 2 says it: the bid is min_bid x (1 + bid_margin), billed with
// the offer's storage; never a bid that reaches the price of a fitting on-demand offer.

const offer = (id: string, dphTotal: number, extra: Partial<MarketOffer> = {}): MarketOffer => ({
  id, gpuName: "RTX 4090", numGpus: 1, gpuRam: 24, dphTotal, rentable: true, location: "", ...extra,
});

describe("bid-choice", () => {
  it("bids min_bid x (1 + margin), rounded up to a hundredth of a cent, billed with storage", () => {
    expect(bidOn({ minBid: 0.2 }, 0.25)).toBe(0.25);
    expect(bidOn({ minBid: 0.1234 }, 0.25)).toBe(0.1543); // 0.15425 up
    expect(bidOn({}, 0.25)).toBeUndefined();
    expect(asBids([offer("1", 0.21, { minBid: 0.2, storagePerHour: 0.01 }), offer("2", 0.5)], 0.25)).toEqual([
      offer("1", 0.26, { minBid: 0.2, storagePerHour: 0.01, bidPerHour: 0.25 } as Partial<MarketOffer>),
    ]);
  });

  it.each([
    { why: "bids cheaper than every fitting on-demand offer: the bids, cheapest first", bids: [["b2", 0.3], ["b1", 0.2]], onDemand: [0.5, 0.6], want: ["b1", "b2"] },
    { why: "a bid that reaches the cheapest on-demand price is left out", bids: [["b1", 0.2], ["b2", 0.5]], onDemand: [0.5], want: ["b1"] },
    { why: "every bid reaches it: on-demand instead", bids: [["b1", 0.5], ["b2", 0.7]], onDemand: [0.5, 0.6], want: ["od-0.5", "od-0.6"] },
    { why: "no bid fits: on-demand", bids: [], onDemand: [0.5], want: ["od-0.5"] },
    { why: "no on-demand offer fits: the bids", bids: [["b1", 0.9]], onDemand: [], want: ["b1"] },
    { why: "nothing fits: nothing", bids: [], onDemand: [], want: [] },
  ] as const)("$why", ({ bids, onDemand, want }) => {
    const bidCandidates = bids.map(([id, price]) => ({ ...offer(id, price), bidPerHour: price }));
    const chosen = bidOrOnDemand(bidCandidates, onDemand.map((p) => offer(`od-${p}`, p)));
    expect(chosen.map((c) => c.id)).toEqual(want);
  });

  it("puts offers on machines to avoid last, keeping the order otherwise; an unknown machine counts as another", () => {
    const offers = [offer("a", 0.1, { machineId: "m1" }), offer("b", 0.2, { machineId: "m2" }), offer("c", 0.3), offer("d", 0.4, { machineId: "m1" })];
    expect(spreadOver(offers, ["m1"]).map((o) => o.id)).toEqual(["b", "c", "a", "d"]);
    expect(spreadOver(offers, undefined).map((o) => o.id)).toEqual(["a", "b", "c", "d"]);
  });
});

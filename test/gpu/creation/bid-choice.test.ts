import { describe, expect, it } from "vitest";
import { asBids, bidOn, spreadOver } from "../../../src/gpu/creation/bid-choice.js";
import type { MarketOffer } from "../../../src/gpu/marketplace/port.js";

// What a bid costs, as SPEC.md section 2 says it: min_bid x (1 + bid_margin), billed with the
// offer's storage; and the machines an endpoint's replicas spread over. Whether to bid at all is
// slot-offers.test.ts.

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

  it("puts offers on machines to avoid last, keeping the order otherwise; an unknown machine counts as another", () => {
    const offers = [offer("a", 0.1, { machineId: "m1" }), offer("b", 0.2, { machineId: "m2" }), offer("c", 0.3), offer("d", 0.4, { machineId: "m1" })];
    expect(spreadOver(offers, ["m1"]).map((o) => o.id)).toEqual(["b", "c", "a", "d"]);
    expect(spreadOver(offers, undefined).map((o) => o.id)).toEqual(["a", "b", "c", "d"]);
  });
});

import { describe, expect, it } from "vitest";
import { rentalKindOf, type Candidate } from "../../../src/gpu/creation/bid-choice.js";
import { nothingToRentText, slotOffers, spreadOverMarkets, type OffersByKind } from "../../../src/gpu/creation/slot-offers.js";
import type { MarketOffer } from "../../../src/gpu/marketplace/port.js";

// What an interruptible slot rents, as SPEC.md section 2 says it: an offer whose bid would reach
// the price of an on-demand offer that fits is rented on-demand instead, on every launch; the way
// back from a fallback rents only a bid that costs at most 90% of the fallback it replaces; with
// `fallback` false a slot whose bids all reach the on-demand price waits rather than bid above it.
// Each row: the fitting bids (id, billed $/h), the fitting on-demand prices, whether on-demand may be
// rented, the cost of the fallback a return replaces; out: what is rented, best first, or why not.

const offer = (id: string, dphTotal: number): MarketOffer => ({ id, gpuName: "RTX 4090", numGpus: 1, gpuRam: 24, dphTotal, rentable: true, location: "" });
const bid = ([id, price]: readonly [string, number]): Candidate => ({ ...offer(id, price), bidPerHour: price });

type Row = [what: string, bids: Array<[string, number]>, onDemand: number[], onDemandAllowed: boolean, replacing: number | undefined, outcome: string];

function outcomeOf(offers: OffersByKind): string {
  const choice = slotOffers(offers);
  if (choice.none) return `nothing: ${nothingToRentText(choice.none)}`;
  const kind = choice.candidates.every((c) => rentalKindOf(c) === "bid") ? "bids" : "on-demand";
  return `${kind} ${choice.candidates.map((c) => c.id).join(", ")}`;
}

describe("what an interruptible slot rents", () => {
  it.each<Row>([
    // A launch that may fall back to on-demand.
    ["bids cheaper than every fitting on-demand offer: the bids, cheapest first", [["b2", 0.3], ["b1", 0.2]], [0.5, 0.6], true, undefined, "bids b1, b2"],
    ["a bid that reaches the cheapest on-demand price is left out", [["b1", 0.2], ["b2", 0.5]], [0.5], true, undefined, "bids b1"],
    ["every bid reaches it: on-demand instead", [["b1", 0.5], ["b2", 0.7]], [0.6, 0.5], true, undefined, "on-demand od-0.6, od-0.5"],
    ["no bid fits: on-demand", [], [0.5], true, undefined, "on-demand od-0.5"],
    ["no on-demand offer fits: any bid within the budget", [["b1", 0.9]], [], true, undefined, "bids b1"],
    ["nothing fits: nothing", [], [], true, undefined, "nothing: no offer fits of either rental kind (bid or on-demand)"],
    // A bid or nothing (`fallback` false): the on-demand offers are still the bar a bid must stay under.
    [
      "bid only, every bid reaches the on-demand price: nothing, rather than a bid above it",
      [["b1", 0.895], ["b2", 0.9]],
      [0.6],
      false,
      undefined,
      "nothing: no bid costs less than the on-demand $0.6/h (the cheapest fitting bid: $0.895/h)",
    ],
    ["bid only, a bid under the on-demand price: that bid", [["b1", 0.45], ["b2", 0.7]], [0.6], false, undefined, "bids b1"],
    ["bid only, no on-demand offer fits: any bid within the budget", [["b1", 0.9]], [], false, undefined, "bids b1"],
    [
      "bid only, no bid fits: nothing",
      [],
      [0.6],
      false,
      undefined,
      "nothing: no offer fits as a bid, and this launch may not rent on-demand",
    ],
    // The way back from a fallback: a bid that costs at most 90% of the fallback it replaces, or nothing.
    ["back from a $0.6/h fallback: bids at most 90% of it and under on-demand", [["b1", 0.3], ["b2", 0.54]], [0.8], false, 0.6, "bids b1, b2"],
    [
      "back from a $0.6/h fallback: a bid that saves less than 10% is not made, though on-demand costs more",
      [["b1", 0.55], ["b2", 0.7]],
      [0.8],
      false,
      0.6,
      "nothing: no bid costs $0.54/h or less, 90% of the $0.6/h machine it would replace (the cheapest fitting bid: $0.55/h)",
    ],
    [
      "back from a $0.6/h fallback: a bid at its price is not made",
      [["b1", 0.6]],
      [0.8],
      false,
      0.6,
      "nothing: no bid costs $0.54/h or less, 90% of the $0.6/h machine it would replace (the cheapest fitting bid: $0.6/h)",
    ],
    [
      "back from a fallback, with on-demand now cheaper than the fallback: on-demand is the bar",
      [["b1", 0.55]],
      [0.5],
      false,
      0.6,
      "nothing: no bid costs less than the on-demand $0.5/h (the cheapest fitting bid: $0.55/h)",
    ],
    ["back from a fallback, no on-demand offer fits: the fallback is the bar", [["b1", 0.5], ["b2", 0.7]], [], false, 0.6, "bids b1"],
  ])("%s", (_what, bids, onDemand, onDemandAllowed, replacing, outcome) => {
    expect(outcomeOf({ bids: bids.map(bid), onDemand: onDemand.map((p) => offer(`od-${p}`, p)), onDemandAllowed, replacing })).toBe(outcome);
  });
});

// capacity.spread_markets: of the markets with a fitting offer within 25% of the cheapest, the one
// holding the fewest of the endpoint's replicas goes first; a dearer market is never chosen for spread.
describe("spreadOverMarkets", () => {
  const at = (market: string, id: string, price: number): MarketOffer => ({ ...offer(`${market}:${id}`, price), market });
  const ids = (offers: readonly MarketOffer[]) => offers.map((o) => o.id).join(" ");
  const offers = [at("vastai", "1", 1.0), at("vastai", "2", 1.1), at("simulated", "1", 1.2), at("simulated", "2", 1.3)];

  it.each<[what: string, replicas: string[], out: string]>([
    ["no replica yet: the cheapest market first", [], "vastai:1 vastai:2 simulated:1 simulated:2"],
    ["one replica on vast.ai: the simulated market's close offers first", ["vastai"], "simulated:1 vastai:1 vastai:2 simulated:2"],
    ["one in each: the cheapest market again", ["vastai", "simulated"], "vastai:1 vastai:2 simulated:1 simulated:2"],
    ["two on vast.ai, one on simulated: simulated", ["vastai", "simulated", "vastai"], "simulated:1 vastai:1 vastai:2 simulated:2"],
  ])("%s", (_what, replicas, out) => {
    expect(ids(spreadOverMarkets(offers, replicas))).toBe(out);
  });

  it("leaves the order as it is when no other market has an offer within 25% of the cheapest", () => {
    const far = [at("vastai", "1", 1.0), at("simulated", "1", 1.26)];
    expect(ids(spreadOverMarkets(far, ["vastai", "vastai"]))).toBe("vastai:1 simulated:1");
  });

  it("spreads four launches two and two, so that one market's outage takes at most half", () => {
    const replicas: string[] = [];
    for (let i = 0; i < 4; i++) replicas.push(spreadOverMarkets(offers, replicas)[0]!.market!);
    expect(replicas.filter((m) => m === "vastai")).toHaveLength(2);
    expect(replicas.filter((m) => m === "simulated")).toHaveLength(2);
  });

  it("spreads the bids a slot rents too", () => {
    const choice = slotOffers({ bids: [{ ...at("vastai", "b", 0.5), bidPerHour: 0.5 }, { ...at("simulated", "b", 0.6), bidPerHour: 0.6 }], onDemand: [], onDemandAllowed: true, replicaMarkets: ["vastai"] });
    expect(ids(choice.candidates)).toBe("simulated:b vastai:b");
  });
});

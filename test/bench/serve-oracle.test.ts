import { describe, expect, it } from "vitest";
import { inFlightPeaks, oracleCost, type OracleOffers } from "../../bench/serving/parts/serve-oracle.js";

// bench:serve's oracle (pure): each simulated minute the replicas its most streams in flight need,
// at that minute's cheapest fitting prices, bids first, on-demand (pools any number of times) in a
// dry spell of the bid market.

const H = 3_600;

describe("inFlightPeaks", () => {
  it("counts the most requests in flight at once in each minute, carrying long ones over minutes", () => {
    // Three requests of 50 s: two overlap in minute 0, one carries from minute 1 into minute 2.
    const peaks = inFlightPeaks([0, 10, 100], 50);
    expect(peaks.slice(0, 4)).toEqual([2, 1, 1, 0]);
    // A request of 200 s is in flight through four minutes.
    expect(inFlightPeaks([30], 200).slice(0, 6)).toEqual([1, 1, 1, 1, 0, 0]);
  });

  it("does not count a request that ends as another begins twice", () => {
    expect(inFlightPeaks([0, 50], 50).slice(0, 2)).toEqual([1, 1]);
  });
});

describe("oracleCost", () => {
  const offers: OracleOffers = {
    bids: [
      { dollarsPerHour: 0.1, pool: false },
      { dollarsPerHour: 0.12, pool: false },
    ],
    onDemand: [
      { dollarsPerHour: 0.3, pool: false, market: "simulated" },
      { dollarsPerHour: 0.4, pool: true, market: "simulated-ondemand" },
    ],
  };

  it("rents each minute's replicas at the cheapest bids, then on-demand, none when idle", () => {
    // Five requests at once for one minute at target 2: 3 replicas, the two bids and the cheapest on-demand.
    const cost = oracleCost({ arrivals: [0, 1, 2, 3, 4], streamS: 30, targetInFlight: 2, maxReplicas: 8, offers });
    expect(cost.machineHours).toBeCloseTo(3 / 60, 9);
    expect(cost.dollars).toBeCloseTo((0.1 + 0.12 + 0.3) / 60, 9);
  });

  it("stays within max_replicas", () => {
    const cost = oracleCost({ arrivals: [0, 1, 2, 3, 4], streamS: 30, targetInFlight: 1, maxReplicas: 2, offers });
    expect(cost.dollars).toBeCloseTo((0.1 + 0.12) / 60, 9);
  });

  it("rents from the other market's pool, as many times as needed, while the bid market is dry", () => {
    const arrivals = [10 * H, 10 * H + 1, 10 * H + 2];
    const cost = oracleCost({ arrivals, streamS: 30, targetInFlight: 1, maxReplicas: 8, offers, drySpell: { fromS: 10 * H, toS: 13 * H, market: "simulated" } });
    expect(cost.dollars).toBeCloseTo((3 * 0.4) / 60, 9);
  });
});

import { describe, expect, it } from "vitest";
import { oracleCost, replicaSteps, type OracleOffers } from "../../bench/serving/parts/serve-oracle.js";

// bench:serve's oracle (pure): at each moment the replicas its streams in flight need at the
// autoscaler's target, each only while needed, at the cheapest fitting prices, bids first,
// on-demand in another market (pools any number of times) in a dry spell of the bid market, whose
// bids rented before it run on while that is cheaper.

const H = 3_600;

describe("replicaSteps", () => {
  it("follows ceil(in flight / target) from moment to moment, cut at each minute", () => {
    // Requests of 50 s at 0, 10 and 100: one in flight, then two, then one, none, one again across a minute.
    expect(replicaSteps([0, 10, 100], 50, 1, 8)).toEqual([
      { fromS: 0, toS: 10, replicas: 1 },
      { fromS: 10, toS: 50, replicas: 2 },
      { fromS: 50, toS: 60, replicas: 1 },
      { fromS: 100, toS: 120, replicas: 1 },
      { fromS: 120, toS: 150, replicas: 1 },
    ]);
    // At target 2, two in flight need one replica.
    expect(replicaSteps([0, 10], 50, 2, 8).map((s) => s.replicas)).toEqual([1, 1, 1]);
  });

  it("does not count a request that ends as another begins twice, and stays within max_replicas", () => {
    expect(replicaSteps([0, 50], 50, 1, 8).map((s) => s.replicas)).toEqual([1, 1, 1]);
    expect(Math.max(...replicaSteps([0, 1, 2, 3], 30, 1, 2).map((s) => s.replicas))).toBe(2);
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
  const drySpell = { fromS: 10 * H, toS: 13 * H, market: "simulated" };

  it("pays a minute's brief peak only while it lasts, not for the whole minute", () => {
    // Two requests of 30 s overlap for 10 s: one replica for 50 s, a second for 10 s.
    const cost = oracleCost({ arrivals: [0, 20], streamS: 30, targetInFlight: 1, maxReplicas: 8, offers });
    expect(cost.machineHours).toBeCloseTo(60 / H, 9);
    expect(cost.dollars).toBeCloseTo((50 * 0.1 + 10 * 0.12) / H, 9);
  });

  it("rents each replica at the cheapest bids, then on-demand, none when idle", () => {
    // Five requests of 30 s a second apart at target 2: replicas 1, 1, 2, 2, 3 (4 s to 30 s), 2, 2, 1, 1.
    const cost = oracleCost({ arrivals: [0, 1, 2, 3, 4], streamS: 30, targetInFlight: 2, maxReplicas: 8, offers });
    expect(cost.machineHours).toBeCloseTo((34 + 30 + 26) / H, 9);
    expect(cost.dollars).toBeCloseTo((34 * 0.1 + 30 * 0.12 + 26 * 0.3) / H, 9);
  });

  it("stays within max_replicas", () => {
    const cost = oracleCost({ arrivals: [0, 1, 2, 3, 4], streamS: 30, targetInFlight: 1, maxReplicas: 2, offers });
    expect(cost.dollars).toBeCloseTo((34 * 0.1 + 32 * 0.12) / H, 9);
  });

  it("keeps the bids rented before a dry spell through it, and rents from the other market's pool beyond them", () => {
    // Three requests of 30 s at 10:00: replica 1 for 32 s, 2 for 30 s (from 1 s), 3 for 28 s (from 2 s).
    const arrivals = [10 * H, 10 * H + 1, 10 * H + 2];
    const cost = oracleCost({ arrivals, streamS: 30, targetInFlight: 1, maxReplicas: 8, offers, drySpell });
    // The second bid, rented the moment before the spell, idles 1 s; the third replica has no bid
    // left and rents the pool (0.4), not the dry market's own on-demand offer (0.3).
    expect(cost.dollars).toBeCloseTo((32 * 0.1 + 31 * 0.12 + 28 * 0.4) / H, 9);
    expect(cost.machineHours).toBeCloseTo((32 + 31 + 28) / H, 9);
  });

  it("lets a bid go in a dry spell when keeping it idle costs more than the pool for the rest", () => {
    // One request at 10:00, one at 12:00: keeping the bid the two hours between costs more than the pool for the second.
    const arrivals = [10 * H, 12 * H];
    const cost = oracleCost({ arrivals, streamS: 30, targetInFlight: 1, maxReplicas: 8, offers, drySpell });
    expect(cost.dollars).toBeCloseTo((30 * 0.1 + 30 * 0.4) / H, 9);
    expect(cost.machineHours).toBeCloseTo(60 / H, 9);
    // Outside a spell the same day costs bids alone.
    expect(oracleCost({ arrivals, streamS: 30, targetInFlight: 1, maxReplicas: 8, offers }).dollars).toBeCloseTo((60 * 0.1) / H, 9);
  });
});

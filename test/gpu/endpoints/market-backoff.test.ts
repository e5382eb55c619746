import { describe, expect, it } from "vitest";
import { createMarketBackoff } from "../../../src/gpu/endpoints/control/market-backoff.js";
import { launchBackoffMs } from "../../../src/gpu/endpoints/control/replica-launch.js";

// One market's failures back off that market alone, per endpoint: 10 s, doubling; every market
// open again when all of them are backing off (the endpoint's own backoff bounds the tries then).

describe("market backoff", () => {
  it("leaves a failed market out of one endpoint's launches for the backoff, doubling, and opens it on success", () => {
    const backoff = createMarketBackoff(launchBackoffMs);
    const all = ["vastai", "runpod"];
    expect(backoff.failed("e1", "vastai", 0)).toBe(10_000);
    expect(backoff.usable("e1", all, 9_999)).toEqual(["runpod"]);
    expect(backoff.usable("e2", all, 9_999)).toEqual(all);
    expect(backoff.usable("e1", all, 10_000)).toEqual(all);
    expect(backoff.failed("e1", "vastai", 10_000)).toBe(20_000);
    expect(backoff.usable("e1", all, 29_999)).toEqual(["runpod"]);
    backoff.succeeded("e1", "vastai");
    expect(backoff.usable("e1", all, 10_001)).toEqual(all);
    expect(backoff.failed("e1", "vastai", 0)).toBe(10_000);
  });

  it("offers every allowed market when all of them back off", () => {
    const backoff = createMarketBackoff(launchBackoffMs);
    backoff.failed("e1", "vastai", 0);
    backoff.failed("e1", "runpod", 0);
    expect(backoff.usable("e1", ["vastai", "runpod"], 1)).toEqual(["vastai", "runpod"]);
    expect(backoff.usable("e1", ["runpod"], 1)).toEqual(["runpod"]);
  });
});

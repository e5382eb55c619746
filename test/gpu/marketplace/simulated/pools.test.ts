import { afterEach, describe, expect, it } from "vitest";
import type { CreateMarketInstanceRequest } from "../../../../src/gpu/marketplace/port.js";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../../src/gpu/marketplace/simulated/simulated.js";

// The simulated market of pools (`pools: true`, bench:serve's RunPod-like market): renting an
// offer leaves it rentable, for any number of instances, and its offers say they are pools.

const opened: SimulatedMarketplace[] = [];

afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close()));
});

function open(pools: boolean): SimulatedMarketplace {
  const market = createSimulatedMarketplace({ creatingMs: 20, loadingMs: 20, modelServerStartMs: 20, bids: false, pools });
  opened.push(market);
  return market;
}

const request = (offerId: string, label: string): CreateMarketInstanceRequest => ({ offerId, label, image: "img", startCommand: "", env: {} });

describe("a simulated market of pools", () => {
  it("rents one offer three times at once, and still offers it as a pool", async () => {
    const market = open(true);
    const [cheapest] = await market.searchOffers({ rentable: true, order: "price", limit: 1 });
    expect(cheapest).toMatchObject({ pool: true, rentable: true });
    expect(cheapest!.machineId).toBeUndefined();
    const rented = await Promise.all(["a", "b", "c"].map((label) => market.createInstance(request(cheapest!.id, label))));
    expect(new Set(rented.map((i) => i.id)).size).toBe(3);
    expect(rented.map((i) => [i.offerId, i.dphTotal])).toEqual(rented.map(() => [cheapest!.id, cheapest!.dphTotal]));
    expect((await market.listOffers()).find((o) => o.id === cheapest!.id)).toMatchObject({ rentable: true, pool: true });
  });

  it("without pools, takes an offer once rented", async () => {
    const market = open(false);
    const [cheapest] = await market.searchOffers({ rentable: true, order: "price", limit: 1 });
    expect(cheapest!.pool).toBeUndefined();
    await market.createInstance(request(cheapest!.id, "a"));
    await expect(market.createInstance(request(cheapest!.id, "b"))).rejects.toThrow(/not rentable/);
  });
});

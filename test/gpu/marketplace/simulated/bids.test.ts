import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../../../src/errors.js";
import type { CreateMarketInstanceRequest } from "../../../../src/gpu/marketplace/port.js";
import { createSimulatedMarketplace, type SimulatedMarketplace, type SimulatedMarketplaceOptions } from "../../../../src/gpu/marketplace/simulated/simulated.js";
import { createPgSimStore } from "../../../../src/gpu/marketplace/simulated/simulated-store.js";
import { preemptionAt } from "../../../../src/gpu/marketplace/simulated/bids.js";
import { createTestDatabase, type TestDatabase } from "../../../support/postgres.js";
import { waitFor } from "../../../support/wait.js";

// The simulated marketplace's interruptible machines: bids on min_bid (half the on-demand price),
// preemptions at SIM_PREEMPT_PER_HOUR (the moment drawn from an injected random number), a
// preemption a test chooses, and bids and preemptions kept in the database across a restart.

const opened: SimulatedMarketplace[] = [];
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close()));
});

afterAll(async () => {
  await db?.drop();
});

function open(options: Partial<SimulatedMarketplaceOptions> = {}): SimulatedMarketplace {
  const market = createSimulatedMarketplace({ creatingMs: 20, loadingMs: 20, modelServerStartMs: 20, ...options });
  opened.push(market);
  return market;
}

const request = (offerId: string, label: string, bidPerHour?: number): CreateMarketInstanceRequest => ({
  offerId,
  label,
  image: "img",
  startCommand: "",
  env: {},
  ...(bidPerHour !== undefined && { bidPerHour }),
});

describe("the simulated bid market", () => {
  it("offers every machine at a minimum bid of half its on-demand price, and prices the bid search at it", async () => {
    const market = open();
    const onDemand = await market.searchOffers({ rentable: true, limit: 50 });
    const bids = await market.searchOffers({ interruptible: true, rentable: true, limit: 1000 });
    expect(market.interruptible).toBe(true);
    for (const offer of onDemand) {
      const bid = bids.find((b) => b.id === offer.id)!;
      expect(bid.minBid).toBeCloseTo(offer.dphTotal / 2, 3);
      expect(bid.dphTotal).toBe(bid.minBid);
      expect(bid.machineId).toBe(offer.id);
    }
    expect(onDemand.every((o) => o.minBid === undefined)).toBe(true);
    const capped = await market.searchOffers({ interruptible: true, maxPrice: 0.1, limit: 1000 });
    expect(capped.length).toBeGreaterThan(0);
    expect(capped.every((o) => o.minBid! <= 0.1)).toBe(true);
  });

  it("rents a bid at its price, interruptible, and refuses one below the minimum bid as the offer taken", async () => {
    const market = open();
    const [offer] = await market.searchOffers({ interruptible: true, rentable: true, limit: 2 });
    const low = await market.createInstance(request(offer!.id, "low", offer!.minBid! * 0.9)).catch((e: unknown) => e);
    expect(low).toBeInstanceOf(ConflictError);
    expect((low as ConflictError).extra?.field).toBe("offer_id");
    const bid = offer!.minBid! * 1.25;
    const created = await market.createInstance(request(offer!.id, "bid", bid));
    expect(created).toMatchObject({ interruptible: true, bidPerHour: bid, dphTotal: bid, machineId: offer!.id });
    const onDemand = await market.createInstance(request((await market.searchOffers({ rentable: true, limit: 1 }))[0]!.id, "od"));
    expect(onDemand.interruptible).toBe(false);
    expect(onDemand.bidPerHour).toBeUndefined();
  });

  it("preempts a chosen bid at once, never an on-demand instance; a preempted bid can run again", async () => {
    const market = open();
    const [a, b] = await market.searchOffers({ interruptible: true, rentable: true, limit: 2 });
    const bid = await market.createInstance(request(a!.id, "bid", a!.minBid!));
    const onDemand = await market.createInstance(request(b!.id, "od"));
    await market.preempt(bid.id);
    expect((await market.getInstance(bid.id))!.status).toBe("preempted");
    await expect(market.preempt(onDemand.id)).rejects.toBeInstanceOf(ConflictError);
    await market.restartInstance(bid.id);
    await waitFor(async () => (await market.getInstance(bid.id))!.status === "running", "the bid running again", 2_000);
  });

  it("preempts bids at SIM_PREEMPT_PER_HOUR, never at 0, the moment drawn from the random number", async () => {
    expect(preemptionAt(1_000, 0, () => 0.5)).toBeUndefined();
    expect(preemptionAt(1_000, 1, () => 1 - Math.exp(-1))).toBe(1_000 + 3_600_000); // a draw of one mean wait: an hour
    const market = open({ preemptPerHour: 3_600, random: () => 1 - Math.exp(-0.5) }); // half a mean wait: 500 ms
    const [a, b] = await market.searchOffers({ interruptible: true, rentable: true, limit: 2 });
    const bid = await market.createInstance(request(a!.id, "bid", a!.minBid!));
    const onDemand = await market.createInstance(request(b!.id, "od"));
    await waitFor(async () => (await market.getInstance(bid.id))!.status === "running", "the bid running", 2_000);
    await waitFor(async () => (await market.getInstance(bid.id))!.status === "preempted", "the bid preempted", 3_000);
    expect((await market.getInstance(onDemand.id))!.status).toBe("running");
    const calm = open({ preemptPerHour: 0, catalogue: { seed: 7 } });
    const [c] = await calm.searchOffers({ interruptible: true, rentable: true, limit: 1 });
    const kept = await calm.createInstance(request(c!.id, "calm", c!.minBid!));
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect((await calm.getInstance(kept.id))!.status).toBe("running");
  });

  it("keeps which instances are bids, their preemption moment and a chosen preemption in the database across a restart", async () => {
    const store = createPgSimStore(db.knex);
    const first = open({ store, preemptPerHour: 3_600, random: () => 1 - Math.exp(-2) }); // 2 s
    const [a, b] = await first.searchOffers({ interruptible: true, rentable: true, limit: 2 });
    const later = await first.createInstance(request(a!.id, "later", a!.minBid!));
    const chosen = await first.createInstance(request(b!.id, "chosen", b!.minBid!));
    await first.preempt(chosen.id);
    await first.close();

    const second = open({ store, preemptPerHour: 0 }); // a restart with other settings keeps the drawn moment
    expect(await second.getInstance(chosen.id)).toMatchObject({ status: "preempted", interruptible: true, bidPerHour: b!.minBid });
    expect(await second.getInstance(later.id)).toMatchObject({ interruptible: true });
    expect((await second.getInstance(later.id))!.status).not.toBe("preempted");
    await waitFor(async () => (await second.getInstance(later.id))!.status === "preempted", "preempted at the moment drawn before the restart", 4_000);
  });
});

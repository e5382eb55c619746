import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NotFoundError } from "../../../src/errors.js";
import { asBids } from "../../../src/gpu/creation/bid-choice.js";
import { createInstance, type CreationRequest } from "../../../src/gpu/creation/creation.js";
import { LLM_DISK_GB } from "../../../src/gpu/creation/launch-plan.js";
import type { GpuContext } from "../../../src/gpu/gpu-context.js";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import { adapterOn } from "../../support/vastai/adapter.js";
import { startVastEmulator, type VastEmulator } from "../../support/vastai/emulator.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { gpuContextOn, templateOffers } from "../helpers.js";

// A bid-only creation on vast.ai's wire format (the way back from an on-demand fallback, or a slot
// without fallback), on the real database: it bids only below the cheapest fitting on-demand offer
// (searched and fitted though it may not be rented) and below the fallback's cost it is given;
// otherwise it rents nothing (no PUT /asks) and says why.

const API_KEY = "vast-slot-offers-0123456789";
const MARGIN = 0.25;
let vast: VastEmulator;
let market: Marketplace;
let db: TestDatabase;
let ctx: GpuContext;
let minBids: number[];

beforeAll(async () => {
  vast = await startVastEmulator({ apiKey: API_KEY, provisioningMs: 50, loadingMs: 50 });
  market = adapterOn(vast, API_KEY);
  db = await createTestDatabase();
  ctx = gpuContextOn(db.knex, market);
  minBids = vast.asks.map((a) => a.min_bid);
});

afterEach(() => {
  vast.asks.forEach((ask, i) => (ask.min_bid = minBids[i]!));
});

afterAll(async () => {
  await market?.close();
  await vast?.close();
  await db?.drop();
});

const bidOnly = (extra: Partial<NonNullable<CreationRequest["interruptible"]>> = {}, avoidMachineIds?: string[]) =>
  createInstance(ctx, {
    templateName: "budget",
    customConfig: { auto_destroy: false },
    actor: "test",
    interruptible: { bidMargin: MARGIN, onDemand: false, ...extra },
    avoidMachineIds,
  });

/** The budget template's bids on the emulator, priced as billed (bid plus storage), cheapest first. */
async function fittingBids() {
  const bidMarket = await market.searchOffers({ interruptible: true, rentable: true, limit: 1000, diskGb: LLM_DISK_GB });
  return templateOffers(asBids(bidMarket, MARGIN), "budget");
}

const bidsPut = () => vast.requests.filter((r) => r.method === "PUT" && /^\/api\/v0\/asks\/\d+\/$/.test(r.path)).length;
const activeRecords = async () => Number((await db.knex("gpu_instances").whereNotIn("status", ["failed", "destroyed"]).count({ n: "*" }))[0]!.n);

/** Runs a creation expected to rent nothing: its error, with no bid sent and no record left active. */
async function rentsNothing(create: () => Promise<unknown>): Promise<NotFoundError> {
  const [puts, active] = [bidsPut(), await activeRecords()];
  const err = await create().catch((e: unknown) => e);
  expect(err).toBeInstanceOf(NotFoundError);
  expect(bidsPut()).toBe(puts);
  expect(await activeRecords()).toBe(active);
  return err as NotFoundError;
}

describe("a bid-only creation on vast.ai", () => {
  it("rents nothing when every fitting bid costs more than a fitting on-demand offer, and names its price", async () => {
    // Minimum bids at the on-demand price: every bid x 1.25 is dearer than its own machine on-demand.
    for (const ask of vast.asks) ask.min_bid = ask.dph_base;
    const onDemand = templateOffers(await market.searchOffers({ rentable: true, limit: 1000, diskGb: LLM_DISK_GB }), "budget");
    const bids = await fittingBids();
    expect(bids.length).toBeGreaterThan(0); // bids within the template's price cap exist: only the on-demand price stops them
    expect(bids[0]!.dphTotal).toBeGreaterThan(onDemand[0]!.dphTotal);

    const err = await rentsNothing(() => bidOnly());
    expect(err.message).toBe(
      `No interruptible machine for template 'budget': no bid costs less than the on-demand $${onDemand[0]!.dphTotal}/h (the cheapest fitting bid: $${bids[0]!.dphTotal}/h)`,
    );
  });

  it("rents nothing when no bid costs at most 90% of the fallback it would replace", async () => {
    const [cheapest] = await fittingBids();
    // The cheapest bid saves 5% of it: not worth a move.
    const err = await rentsNothing(() => bidOnly({ replacing: cheapest!.dphTotal / 0.95 }));
    expect(err.message).toMatch(/no bid costs \$[\d.]+\/h or less, 90% of the \$[\d.]+\/h machine it would replace/);
  });

  it("rents a bid under both the on-demand offers and 90% of the fallback, even on a machine it would rather avoid", async () => {
    const [cheapest, next] = await fittingBids();
    expect(next!.dphTotal).toBeGreaterThan(cheapest!.dphTotal);
    const replacing = (cheapest!.dphTotal + next!.dphTotal) / 2 / 0.9; // only the cheapest bid is within 90% of it
    const puts = bidsPut();
    const created = await bidOnly({ replacing }, [cheapest!.machineId!]);
    const record = (await ctx.instances.get(created.instanceId))!;
    expect(record).toMatchObject({ interruptible: true, offerId: cheapest!.id, bidPerHour: cheapest!.bidPerHour, costPerHour: cheapest!.dphTotal });
    expect(record.costPerHour).toBeLessThanOrEqual(replacing * 0.9);
    expect(bidsPut()).toBe(puts + 1);
  });
});

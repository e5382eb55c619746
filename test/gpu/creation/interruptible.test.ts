import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidInputError } from "../../../src/errors.js";
import { createInstance } from "../../../src/gpu/creation/creation.js";
import type { GpuContext } from "../../../src/gpu/gpu-context.js";
import { syncRecord } from "../../../src/gpu/lifecycle/status-sync.js";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import type { SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, type TestServer } from "../../support/server.js";
import { gpuContextOn, rest, templateOffers } from "../helpers.js";

// An interruptible creation on the simulated marketplace: it bids min_bid x (1 + margin) on the
// cheapest fitting machine unless an on-demand offer that fits costs no more, records the bid, and
// the instance answers show it; a preemption is stored exited with preempted_at, shown as such.

let db: TestDatabase;
let simulated: SimulatedMarketplace;
let server: TestServer;
let ctx: GpuContext;

beforeAll(async () => {
  db = await createTestDatabase();
  simulated = createFastSimulatedMarketplace();
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: simulated });
  ctx = contextOn(simulated);
});

afterAll(async () => {
  await server?.close();
  await simulated?.close();
  await db?.drop();
});

const contextOn = (marketplace: Marketplace) => gpuContextOn(db.knex, marketplace);

const create = (extra: Parameters<typeof createInstance>[1] extends infer R ? Partial<R> : never, on = ctx) =>
  createInstance(on, { templateName: "budget", customConfig: { auto_destroy: false }, actor: "test", ...extra });

interface Listed {
  instances: Array<{ instance_id: string; interruptible?: boolean; bid_per_hour?: number; cost_per_hour: number; preempted_at?: string; status: string }>;
}

describe("an interruptible creation", () => {
  it("bids min_bid x (1 + bid_margin) on the cheapest fitting machine and shows interruptible and bid_per_hour", async () => {
    const bidMarket = templateOffers(await simulated.searchOffers({ interruptible: true, rentable: true, limit: 1000 }), "budget");
    const created = await create({ interruptible: { bidMargin: 0.25 } });
    const record = (await ctx.instances.get(created.instanceId))!;
    const offer = bidMarket.find((o) => o.id === record.offerId)!;
    expect(offer).toBeDefined();
    expect(record).toMatchObject({ interruptible: true, bidPerHour: Math.ceil(offer.minBid! * 1.25 * 10_000) / 10_000, preemptedAt: null });
    expect(record.costPerHour).toBe(record.bidPerHour); // the simulated market bills no storage apart
    expect(created.message).toMatch(/interruptible bid of \$/);

    const listed = await rest<Listed>(server.url, "GET", "/api/gpu/instances");
    expect(listed.body.instances.find((i) => i.instance_id === created.instanceId)).toMatchObject({ interruptible: true, bid_per_hour: record.bidPerHour });
    const basic = await rest<{ data: Record<string, unknown> }>(server.url, "GET", `/api/gpu/instances/${created.instanceId}`);
    expect(basic.body.data).toMatchObject({ interruptible: true, bid_per_hour: record.bidPerHour, cost_per_hour: record.bidPerHour });
    const enhanced = await rest<{ data: { db_info: Record<string, unknown> } }>(server.url, "GET", `/api/gpu/instances/${created.instanceId}/enhanced`);
    expect(enhanced.body.data.db_info).toMatchObject({ interruptible: true, bid_per_hour: record.bidPerHour });
  });

  it("rents on-demand when every fitting bid would reach the price of a fitting on-demand offer", async () => {
    const created = await create({ interruptible: { bidMargin: 1.01 } }); // twice the minimum bid: above the on-demand price
    const record = (await ctx.instances.get(created.instanceId))!;
    expect(record).toMatchObject({ interruptible: false, bidPerHour: null });
    const rented = (await simulated.listOffers()).find((o) => o.id === record.offerId)!;
    expect(record.costPerHour).toBe(rented.dphTotal); // its on-demand price
  });

  it("keeps off the machines it is asked to avoid while others fit", async () => {
    const bidMarket = templateOffers(await simulated.searchOffers({ interruptible: true, rentable: true, limit: 1000 }), "budget");
    const first = bidMarket[0]!;
    const created = await create({ interruptible: { bidMargin: 0.25 }, avoidMachineIds: [first.machineId!] });
    expect((await ctx.instances.get(created.instanceId))!.offerId).not.toBe(first.id);
  });

  it("answers 400 naming interruptible on a marketplace without interruptible machines, renting nothing", async () => {
    const plain = contextOn({ ...simulated, interruptible: false });
    const err = await create({ interruptible: { bidMargin: 0.25 } }, plain).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect((err as InvalidInputError).extra?.field).toBe("interruptible");
  });

  it("stores a preempted bid as exited with preempted_at, shown as exited and preempted; clears it when it runs again", async () => {
    const created = await create({ interruptible: { bidMargin: 0.25 } });
    const id = created.instanceId;
    const record = (await ctx.instances.get(id))!;
    await simulated.preempt(record.marketInstanceId!);
    const synced = await syncRecord(ctx, record);
    expect(synced.record).toMatchObject({ status: "exited" });
    expect(synced.record.preemptedAt).toBeInstanceOf(Date);
    const log = await db.knex("GpuExecutionLog").where({ instance_id: id, operation: "status_change" }).orderBy("id", "desc").first();
    expect(log.result).toMatch(/-> exited \(preempted by the marketplace\)/);
    expect(log.metadata).toMatchObject({ market_status: "preempted", preempted: true });

    const basic = await rest<{ data: Record<string, unknown> }>(server.url, "GET", `/api/gpu/instances/${id}`);
    expect(basic.body.data).toMatchObject({ status: "exited", preempted: true, interruptible: true });
    const listed = await rest<Listed>(server.url, "GET", "/api/gpu/instances?status_filter=exited");
    expect(listed.body.instances.find((i) => i.instance_id === id)?.preempted_at).toMatch(/^\d{4}-/);

    await simulated.restartInstance(record.marketInstanceId!);
    let current = (await ctx.instances.get(id))!;
    for (let i = 0; i < 50 && current.status === "exited"; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      current = (await syncRecord(ctx, current)).record;
    }
    expect(current.status).not.toBe("exited");
    expect(current.preemptedAt).toBeNull();
  });
});

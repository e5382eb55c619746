import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ConflictError, InvalidInputError } from "../../../../src/errors.js";
import type { CreateMarketInstanceRequest } from "../../../../src/gpu/marketplace/port.js";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../../src/gpu/marketplace/simulated/simulated.js";
import { createPgSimStore } from "../../../../src/gpu/marketplace/simulated/simulated-store.js";
import { createTestElasticsearch } from "../../../support/elasticsearch.js";
import { BID_MARKET, createTwoSimulatedMarkets, ON_DEMAND_MARKET, type TwoSimulatedMarkets } from "../../../support/markets/two-simulated-markets.js";
import { createTestDatabase, type TestDatabase } from "../../../support/postgres.js";
import { startTestServer, type TestServer } from "../../../support/server.js";
import { rest, waitFor } from "../../helpers.js";

// A shortage on the simulated marketplace (setDrySpell): no rentable offer during it, machines
// already rented left running; an on-demand-only market (bids: false); and the service on two
// simulated markets renting from the second while the first is dry, as bench:serve's two-market day.

let db: TestDatabase;
const opened: SimulatedMarketplace[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
});

afterEach(async () => {
  await Promise.all(opened.splice(0).map((m) => m.close()));
});

afterAll(async () => {
  await db?.drop();
});

const request = (offerId: string, label: string, bidPerHour?: number): CreateMarketInstanceRequest => ({
  offerId,
  label,
  image: "img",
  startCommand: "",
  env: {},
  ...(bidPerHour !== undefined && { bidPerHour }),
});

const HOUR = 3_600_000;

describe("the simulated marketplace's dry spell", () => {
  it("answers no offer during the spell, refuses a create as no capacity, keeps its machines running, and offers again after it", async () => {
    const market = createSimulatedMarketplace({ creatingMs: 10, loadingMs: 10, modelServerStartMs: 10, store: createPgSimStore(db.knex) });
    opened.push(market);
    const [offer, other] = await market.searchOffers({ rentable: true, limit: 2 });
    const rented = await market.createInstance(request(offer!.id, "before-the-spell"));

    market.setDrySpell({ fromMs: Date.now(), untilMs: Date.now() + HOUR });
    expect(await market.searchOffers({ rentable: true, limit: 50 })).toEqual([]);
    expect(await market.searchOffers({ interruptible: true, rentable: true, limit: 50 })).toEqual([]);
    expect((await market.listOffers()).filter((o) => o.rentable)).toEqual([]);
    const refused = await market.createInstance(request(other!.id, "during-the-spell")).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ConflictError);
    expect((refused as ConflictError).extra?.field).toBe("offer_id");
    await waitFor("the machine rented before the spell running", async () => ((await market.getInstance(rented.id))?.status === "running" ? true : undefined));

    // A spell that has ended (or is yet to come) leaves the market as it was.
    market.setDrySpell({ fromMs: Date.now() - 2 * HOUR, untilMs: Date.now() - HOUR });
    expect((await market.searchOffers({ rentable: true, limit: 1 })).map((o) => o.id)).toEqual([other!.id]); // the cheapest not rented
    market.setDrySpell({ fromMs: Date.now() + HOUR, untilMs: Date.now() + 2 * HOUR });
    expect(await market.createInstance(request(other!.id, "after-the-spell"))).toMatchObject({ offerId: other!.id });
    expect(() => market.setDrySpell({ fromMs: 5, untilMs: 5 })).toThrow(/fromMs < untilMs/);
  });

  it("rents no bids on a market created with bids: false", async () => {
    const market = createSimulatedMarketplace({ creatingMs: 10, loadingMs: 10, modelServerStartMs: 10, bids: false });
    opened.push(market);
    expect(market.interruptible).toBe(false);
    expect(await market.searchOffers({ interruptible: true, rentable: true, limit: 5 })).toEqual([]);
    const [offer] = await market.searchOffers({ rentable: true, limit: 1 });
    const bid = await market.createInstance(request(offer!.id, "a-bid", offer!.dphTotal)).catch((e: unknown) => e);
    expect(bid).toBeInstanceOf(InvalidInputError);
    expect((bid as InvalidInputError).extra?.field).toBe("interruptible");
  });
});

describe("the service on two simulated markets, the first dry", () => {
  let markets: TwoSimulatedMarkets;
  let server: TestServer;
  beforeAll(async () => {
    markets = createTwoSimulatedMarkets({ creatingMs: 100, loadingMs: 100, modelServerStartMs: 100 });
    server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: markets.marketplace, env: { GPU_STATUS_SYNC_MS: "100" } });
  });
  afterAll(async () => {
    await server?.close();
    await markets?.marketplace.close();
  });

  it("searches and rents on the on-demand market alone while the bid market has no offer", async () => {
    const search = () => rest<{ offers: Array<{ market: string; rentable: boolean }>; markets: Array<{ market: string; ok: boolean; offers: number }> }>(server.url, "POST", "/api/gpu/search-offers", { limit: 1000 });
    const before = await search();
    expect(before.body.markets.map((m) => [m.market, m.ok, m.offers > 0])).toEqual([
      [BID_MARKET, true, true],
      [ON_DEMAND_MARKET, true, true],
    ]);

    markets.bids.setDrySpell({ fromMs: Date.now(), untilMs: Date.now() + HOUR });
    const during = await search();
    expect(during.status).toBe(200);
    // The bid market still lists its machines, none of them rentable; the other rents as before.
    const listed = (market: string) => during.body.offers.filter((o) => o.market === market);
    expect(listed(BID_MARKET).length).toBeGreaterThan(0);
    expect(listed(BID_MARKET).filter((o) => o.rentable)).toEqual([]);
    expect(listed(ON_DEMAND_MARKET).filter((o) => o.rentable).length).toBeGreaterThan(0);

    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    const row = await db.knex("gpu_instances").where({ instance_id: id }).first();
    expect(row).toMatchObject({ market: ON_DEMAND_MARKET, interruptible: false });
    await waitFor("running_llm on the on-demand market", async () => ((await db.knex("gpu_instances").where({ instance_id: id }).first()).status === "running_llm" ? true : undefined), 15_000);
    expect((await rest(server.url, "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CreateMarketInstanceRequest, Marketplace, MarketOffer, OfferFilter } from "../../../src/gpu/marketplace/port.js";
import { filterOffers } from "../../../src/gpu/marketplace/offer-filter.js";
import type { SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, type TestServer } from "../../support/server.js";
import { rest, templateOffers } from "../helpers.js";

// Next offer on a race: an automatic pick whose offer was rented by someone else between the
// offer search and the rent tries the next cheapest matching offer, up to 5; a named offer
// answers 409 at once. Concurrent creates of this service never race each other for one offer.

let db: TestDatabase;
let simulated: SimulatedMarketplace;
let server: TestServer;
/** Offers a rival renter takes right after the service searched the offers. */
let rivalTakes: (offers: MarketOffer[]) => MarketOffer[] = () => [];
const rentAttempts: string[] = [];
/** Concurrent creates: most of the budget offers left rentable after the tests before. */
const CONCURRENT = 20;

/** The simulated marketplace, with a rival account renting offers the moment the service has found them. */
function withRival(market: SimulatedMarketplace): Marketplace {
  let rivals = 0;
  return {
    ...market,
    async searchOffers(filter, signal) {
      const offers = await market.searchOffers(filter, signal);
      for (const offer of rivalTakes(offers)) {
        await market.createInstance({ offerId: offer.id, label: `rival-${++rivals}`, image: "x", startCommand: "", env: {} });
      }
      rivalTakes = () => [];
      return offers;
    },
    async createInstance(request: CreateMarketInstanceRequest, signal?: AbortSignal) {
      rentAttempts.push(request.offerId);
      return market.createInstance(request, signal);
    },
  };
}

beforeAll(async () => {
  db = await createTestDatabase({ poolMax: 20 });
  simulated = createFastSimulatedMarketplace();
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: withRival(simulated) });
});

afterAll(async () => {
  await server?.close();
  await simulated?.close();
  await db?.drop();
});

/** The offers the budget template may rent, cheapest first, as the service orders them. */
const budgetOffers = (offers: MarketOffer[]) => templateOffers(offers, "budget");

const record = (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();
const logsOf = (id: string) => db.knex("GpuExecutionLog").where({ instance_id: id }).orderBy("id");

describe("creating from a template without offer_id", () => {
  it("rents the next cheapest matching offer when the chosen one was rented meanwhile", async () => {
    const expected = budgetOffers(await simulated.listOffers());
    rivalTakes = (offers) => budgetOffers(offers).slice(0, 3);
    rentAttempts.length = 0;

    const res = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");

    expect(res.status).toBe(200);
    expect(rentAttempts).toEqual(expected.slice(0, 4).map((o) => o.id));
    const row = await record(res.body.instance_id);
    expect(row).toMatchObject({ offer_id: expected[3]!.id, cost_per_hour: expected[3]!.dphTotal, status: "creating" });
    const logs = await logsOf(res.body.instance_id);
    expect(logs.map((l) => [l.operation, l.success])).toEqual([["create_instance", true]]);
  });

  it("answers 409 after 5 offers were taken, with a failed record that costs nothing", async () => {
    rivalTakes = (offers) => budgetOffers(offers).slice(0, 5);
    rentAttempts.length = 0;

    const res = await rest<{ detail: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");

    expect(res.status).toBe(409);
    expect(res.body.detail).toMatch(/is not rentable any more/);
    expect(rentAttempts).toHaveLength(5);
    const [failed] = await db.knex("gpu_instances").where({ status: "failed" });
    expect(failed.offer_id).toBe(rentAttempts[4]);
    expect(failed.destroyed_at).toEqual(failed.created_at);
    const logs = await logsOf(failed.instance_id);
    expect(logs.map((l) => [l.operation, l.success])).toEqual([["create_instance", false]]);
    const analysis = await rest<{ total_cost: number; uptime_hours: number }>(server.url, "GET", `/api/gpu/instances/${failed.instance_id}/cost-analysis`);
    expect(analysis.body).toMatchObject({ total_cost: 0, uptime_hours: 0 });
    const list = await rest<{ instances: Array<{ total_cost: number; uptime: string }> }>(server.url, "GET", "/api/gpu/instances?status_filter=failed");
    expect(list.body.instances).toEqual([expect.objectContaining({ total_cost: 0, uptime: "0:00:00" })]);
  });
});

describe("creating with an explicit offer_id", () => {
  it("answers 409 at once when the offer was rented meanwhile", async () => {
    const [offer] = budgetOffers(await simulated.listOffers());
    rivalTakes = () => [offer!];
    rentAttempts.length = 0;

    const res = await rest<{ detail: string }>(server.url, "POST", `/api/gpu/instances/from-template?template_name=budget&offer_id=${offer!.id}`);

    expect(res.status).toBe(409);
    expect(res.body.detail).toContain(offer!.id);
    expect(rentAttempts).toEqual([offer!.id]);
  });

  it("answers 409 without asking the marketplace when one of this service's instances holds the offer", async () => {
    const created = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    const held = (await record(created.body.instance_id)).offer_id as string;
    // The catalogue still lists it as rentable, as a marketplace answering from a stale cache would.
    const staleOffers = async () => (await simulated.listOffers()).map((o) => ({ ...o, rentable: true }));
    const stale = { ...simulated, listOffers: staleOffers, searchOffers: async (filter: OfferFilter) => filterOffers(await staleOffers(), filter) };
    const second = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: withRival(stale) });
    try {
      rentAttempts.length = 0;
      const res = await rest<{ detail: string }>(second.url, "POST", `/api/gpu/instances/from-template?template_name=budget&offer_id=${held}`);
      expect(res.status).toBe(409);
      expect(res.body.detail).toContain(held);
      expect(rentAttempts).toEqual([]);
    } finally {
      await second.close();
    }
  });
});

describe(`${CONCURRENT} concurrent creates from budget`, () => {
  it("all succeed, each on an offer of its own", async () => {
    const before = await db.knex("gpu_instances").count<Array<{ count: string }>>("* as count");
    expect(budgetOffers(await simulated.listOffers()).length).toBeGreaterThanOrEqual(CONCURRENT);
    rentAttempts.length = 0;

    const answers = await Promise.all(
      Array.from({ length: CONCURRENT }, () => rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget")),
    );

    expect(answers.map((a) => a.status)).toEqual(Array(CONCURRENT).fill(200));
    const ids = answers.map((a) => a.body.instance_id);
    const rows = await db.knex("gpu_instances").whereIn("instance_id", ids);
    expect(rows.every((r) => r.status !== "failed" && r.market_instance_id !== null)).toBe(true);
    expect(new Set(rows.map((r) => r.offer_id)).size).toBe(CONCURRENT);
    expect(rentAttempts).toHaveLength(CONCURRENT);
    const after = await db.knex("gpu_instances").count<Array<{ count: string }>>("* as count");
    expect(Number(after[0]!.count) - Number(before[0]!.count)).toBe(CONCURRENT);
  });
});

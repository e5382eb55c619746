import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../../src/gpu/creation/launch-plan.js";
import { findTemplate } from "../../../../src/gpu/creation/templates.js";
import { fitsTemplate, type VastAsk } from "../../../support/vastai/catalogue.js";
import { startTwoMarketService, type TwoMarketService } from "../../../support/markets/two-markets.js";
import { rest, waitFor } from "../../helpers.js";
import { marketsApi, type MarketAnswer, type Offer } from "./markets-api.js";

// GpuService on vast.ai (its emulator) and the simulated market at once, through its REST API:
// one catalogue over both, a market that fails or hangs answering for itself alone, an
// auto-pick refused in one market rented in the other, and instances kept as they were while
// their market cannot be reached.

let service: TwoMarketService;
const { url, markets, record } = marketsApi(() => service);

beforeAll(async () => {
  service = await startTwoMarketService({ GPU_STATUS_SYNC_MS: "100" });
});

afterAll(async () => {
  await service?.close();
});

/** Every ask as it was, after a test that changed the vast.ai catalogue. */
let saved: VastAsk[] = [];
afterEach(() => {
  for (const [i, ask] of saved.entries()) Object.assign(service.vast.asks[i]!, ask);
  saved = [];
  service.vast.delay(0);
  service.vast.failNext(0, 500);
  service.vast.onCreate(undefined);
  service.vast.onSearch(undefined);
});

/**
 * vast.ai rents `count` hosts that fit `template`, and they are the cheapest fitting offers over
 * both markets: an auto-pick tries them first. Returns the first one's ask.
 */
function makeVastCheapest(template: string, count = 1): VastAsk {
  saved = service.vast.asks.map((a) => ({ ...a }));
  const chosen = service.vast.asks.filter((a) => a.rentable && a.verified && fitsTemplate(a, findTemplate(template)!, LLM_DISK_GB)).slice(0, count);
  expect(chosen).toHaveLength(count);
  for (const ask of service.vast.asks) if (!chosen.includes(ask)) ask.rentable = false;
  chosen.forEach((ask, i) => (ask.dph_base = 0.01 + i * 0.001));
  return chosen[0]!;
}

describe("MARKETPLACE=vastai,simulated: one catalogue over two markets", () => {
  it("answers every market's offers, each naming its market, with ids <market>:<id>, and filters by market", async () => {
    const all = await rest<{ offers: Offer[]; markets: MarketAnswer[] }>(url(), "POST", "/api/gpu/search-offers", { limit: 1000 });
    expect(all.status).toBe(200);
    const byMarket = (m: string) => all.body.offers.filter((o) => o.market === m);
    expect(byMarket("vastai").length).toBeGreaterThan(0);
    expect(byMarket("simulated").length).toBeGreaterThan(0);
    expect(all.body.offers.every((o) => o.id.startsWith(`${o.market}:`))).toBe(true);
    expect(all.body.markets).toEqual([
      { market: "vastai", ok: true, offers: byMarket("vastai").length },
      { market: "simulated", ok: true, offers: byMarket("simulated").length },
    ]);
    // Cheapest first over both markets.
    const prices = all.body.offers.map((o) => o.dph_total);
    expect(prices).toEqual([...prices].sort((a, b) => a - b));

    const vastOnly = await rest<{ offers: Offer[]; markets: MarketAnswer[] }>(url(), "GET", "/api/gpu/offers?market=vastai");
    expect(vastOnly.status).toBe(200);
    expect(vastOnly.body.offers.length).toBeGreaterThan(0);
    expect(vastOnly.body.offers.every((o) => o.market === "vastai")).toBe(true);
    expect(vastOnly.body.markets.map((m) => m.market)).toEqual(["vastai"]);
  });

  it("answers with the simulated market's offers when vast.ai fails, and says so in markets", async () => {
    service.vast.failNext(1000, 500);
    const answer = await rest<{ offers: Offer[]; markets: MarketAnswer[] }>(url(), "POST", "/api/gpu/search-offers", { gpu_name: "4090" });
    expect(answer.status).toBe(200);
    expect(answer.body.offers.length).toBeGreaterThan(0);
    expect(answer.body.offers.every((o) => o.market === "simulated")).toBe(true);
    expect(answer.body.markets[0]).toMatchObject({ market: "vastai", ok: false, offers: 0, error: expect.stringMatching(/HTTP 500/) });
    expect(answer.body.markets[1]).toMatchObject({ market: "simulated", ok: true });
    expect((await markets())[0]).toMatchObject({ name: "vastai", state: "failing", error: expect.stringMatching(/HTTP 500/), since: expect.any(String) });
  });

  it("answers at the market's timeout when vast.ai hangs, not when vast.ai would have answered", async () => {
    service.vast.delay(10_000);
    const started = Date.now();
    const answer = await rest<{ offers: Offer[]; markets: MarketAnswer[] }>(url(), "POST", "/api/gpu/search-offers", {});
    const elapsed = Date.now() - started;
    expect(answer.status).toBe(200);
    expect(answer.body.markets[0]).toMatchObject({ market: "vastai", ok: false, error: expect.stringMatching(/vastai.*did not answer within 1500 ms/) });
    expect(answer.body.offers.length).toBeGreaterThan(0);
    // MARKETPLACE_TIMEOUT_MS is 1500: the search never waits for the 10 s hang.
    expect(elapsed).toBeLessThan(8_000);
  });

  it("answers 400 naming the field for an unknown market in a filter and an offer_id naming a market not configured", async () => {
    const filter = await rest<{ detail: string; field: string }>(url(), "POST", "/api/gpu/search-offers", { market: "runpod" });
    expect(filter.status).toBe(400);
    expect(filter.body).toMatchObject({ field: "market", detail: expect.stringMatching(/market must be one of the configured markets vastai, simulated, got 'runpod'/) });
    expect((await rest<{ field: string }>(url(), "GET", "/api/gpu/offers?market=aws")).body.field).toBe("market");
    const records = async () => Number((await service.db.knex("gpu_instances").count("* as n").first())!.n);
    const before = await records();
    for (const offerId of ["runpod:abc", "4200001", "nowhere:1"]) {
      const created = await rest<{ detail: string; field: string }>(url(), "POST", "/api/gpu/instances", { offer_id: offerId });
      expect(created.status, offerId).toBe(400);
      expect(created.body.field).toBe("offer_id");
      expect(created.body.detail).toMatch(/names no configured market/);
    }
    expect(await records()).toBe(before);
  });

  it("rents a named offer in its own market, lists and destroys it there", async () => {
    const search = await rest<{ offers: Offer[] }>(url(), "POST", "/api/gpu/search-offers", { market: "simulated", rentable: true, limit: 1 });
    const offer = search.body.offers[0]!;
    const created = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances", { offer_id: offer.id });
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    expect(await record(id)).toMatchObject({ market: "simulated", offer_id: offer.id });
    const listed = await rest<{ instances: Array<{ instance_id: string; market: string }> }>(url(), "GET", "/api/gpu/instances");
    expect(listed.body.instances.find((i) => i.instance_id === id)).toMatchObject({ market: "simulated" });
    const simulated = (await markets()).find((m) => m.name === "simulated")!;
    expect(simulated.instances.map((i) => i.instance_id)).toContain(id);
    expect(simulated.dph_total).toBeGreaterThan(0);
    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
    expect((await record(id)).status).toBe("destroyed");
  });

  it("fails an auto-pick over from vast.ai, which refuses its cheapest offer at create time, to the simulated market", async () => {
    const ask = makeVastCheapest("budget");
    const creates: number[] = [];
    service.vast.onCreate(() => {
      creates.push(Date.now());
      service.vast.refuseNextCreate("gone");
    });
    const created = await rest<{ instance_id: string; message: string }>(url(), "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    expect(creates).toHaveLength(1); // vast.ai was asked first, for its cheapest offer, and refused
    const row = await record(id);
    expect(row).toMatchObject({ market: "simulated" });
    expect(row.offer_id).toMatch(/^simulated:/);
    expect(row.offer_id).not.toBe(`vastai:${ask.id}`);
    await waitFor("running_llm on the simulated market", async () => ((await record(id)).status === "running_llm" ? true : undefined), 15_000);
    const logs = await rest<{ logs: Array<{ operation: string; result: string; created_at: string }> }>(url(), "GET", `/api/gpu/instances/${id}/logs?limit=20`);
    expect(logs.body.logs.map((l) => l.operation)).toContain("create_instance");
    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });

  it("tries five candidates at most and answers the last market's own words when each was refused", async () => {
    makeVastCheapest("budget", 6);
    let creates = 0;
    service.vast.onCreate(() => {
      creates++;
      service.vast.refuseNextCreate("gone");
    });
    const created = await rest<{ detail: string; instance_id?: string }>(url(), "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(created.status).toBe(409);
    expect(creates).toBe(5);
    // vast.ai's words for a 410, as its adapter passes them on, named as vast.ai's.
    expect(created.body.detail).toMatch(/^vastai: Offer '\d+' is not rentable any more: .*no longer available/);
    const failed = await service.db.knex("gpu_instances").where({ status: "failed" }).orderBy("created_at", "desc").first();
    expect(failed).toMatchObject({ market: "vastai" });
  });

  it("leaves vast.ai's instances as they were stored while vast.ai cannot be reached, and follows them again after", async () => {
    const ask = makeVastCheapest("budget");
    const created = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances", { offer_id: `vastai:${ask.id}` });
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    await waitFor("running on vast.ai", async () => ((await record(id)).status === "running" ? true : undefined), 15_000);
    expect(await record(id)).toMatchObject({ market: "vastai" });

    service.vast.failNext(100_000, 502);
    const failedLists = () => service.vast.requests.filter((r) => r.path === "/api/v1/instances/" && r.status === 502).length;
    const before = failedLists();
    await waitFor("three sync rounds with vast.ai down", async () => (failedLists() >= before + 3 ? true : undefined), 20_000);
    expect(await record(id)).toMatchObject({ status: "running", destroyed_at: null });
    const down = (await markets()).find((m) => m.name === "vastai")!;
    expect(down).toMatchObject({ state: "failing", error: expect.stringMatching(/HTTP 502/) });
    expect(down.instances.map((i) => i.instance_id)).toContain(id);
    const metrics = await (await fetch(`${url()}/metrics`)).text();
    expect(metrics).toMatch(/gpu_market_state\{market="vastai",state="failing"\} 1/);
    expect(metrics).toMatch(/gpu_market_state\{market="simulated",state="ok"\} 1/);
    expect(Number(/gpu_market_errors_total\{market="vastai"\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThanOrEqual(3);
    expect(Number(/gpu_market_calls_total\{market="simulated"\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThan(0);
    const changes = await service.db.knex("GpuExecutionLog").where({ instance_id: id, operation: "status_change" });
    expect(changes.every((c: { result: string }) => !/destroyed|failed/.test(c.result))).toBe(true);

    service.vast.failNext(0, 502);
    const machine = [...service.vast.instances.values()].find((m) => m.label.includes(id))!;
    service.vast.setStatus(machine.id, "exited");
    await waitFor("exited once vast.ai answers", async () => ((await record(id)).status === "exited" ? true : undefined), 15_000);
    await waitFor("vastai ok again", async () => ((await markets())[0]!.state === "ok" ? true : undefined), 10_000);
    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });

  // Last: a blocked market stays blocked for auto-picks for a minute.
  it("blocks vast.ai for auto-picks when it refuses the key at create time, and rents on the simulated market", async () => {
    makeVastCheapest("budget");
    const key = service.emulator.apiKey;
    // The key is revoked between the search and the create, as an operator rotating it would.
    service.vast.onSearch(() => void (service.emulator.apiKey = "rotated-elsewhere"));
    try {
      const created = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances/from-template?template_name=budget");
      expect(created.status).toBe(200);
      expect(await record(created.body.instance_id)).toMatchObject({ market: "simulated" });
      const vastai = (await markets()).find((m) => m.name === "vastai")!;
      expect(vastai).toMatchObject({ state: "blocked", error: expect.stringMatching(/vast.ai refused the API key \(HTTP 401\); check VAST_API_KEY/), since: expect.any(String) });

      // Blocked: the next auto-pick does not ask vast.ai at all, though its key works again.
      service.emulator.apiKey = key;
      service.vast.onSearch(undefined);
      const creates = service.vast.requests.filter((r) => r.method === "PUT").length;
      const next = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances/from-template?template_name=budget");
      expect(next.status).toBe(200);
      expect(await record(next.body.instance_id)).toMatchObject({ market: "simulated" });
      expect(service.vast.requests.filter((r) => r.method === "PUT").length).toBe(creates);
    } finally {
      service.emulator.apiKey = key;
    }
  });
});

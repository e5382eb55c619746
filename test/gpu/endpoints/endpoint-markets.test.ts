import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../src/gpu/creation/launch-plan.js";
import { findTemplate } from "../../../src/gpu/creation/templates.js";
import { validCapacity } from "../../../src/gpu/endpoints/resource/endpoint-capacity.js";
import { fitsTemplate, type VastAsk } from "../../support/vastai/catalogue.js";
import { startTwoMarketService, type TwoMarketService } from "../../support/markets/two-markets.js";
import { rest, waitFor } from "../helpers.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, readyIds, waitForEndpoint } from "./helpers.js";

// Endpoints over two markets (MARKETPLACE=vastai,simulated, vast.ai on its emulator):
// capacity.markets validated, shown, stored, and narrowing where an endpoint's replicas are rented.

let service: TwoMarketService;
const url = () => service.server.url;
const marketOf = async (instanceId: string) => (await service.db.knex("gpu_instances").where({ instance_id: instanceId }).first()).market as string;

beforeAll(async () => {
  service = await startTwoMarketService({ ...FAST_ENDPOINT_ENV, GPU_STATUS_SYNC_MS: "100" });
});

afterAll(async () => {
  await service?.close();
});

let saved: VastAsk[] = [];
afterEach(() => {
  for (const [i, ask] of saved.entries()) Object.assign(service.vast.asks[i]!, ask);
  saved = [];
  service.vast.onCreate(undefined);
});

/** vast.ai's fitting hosts become the cheapest offers over both markets: an auto-pick tries them first. Returns how many. */
function makeVastCheapest(template: string): number {
  saved = service.vast.asks.map((a) => ({ ...a }));
  const fitting = service.vast.asks.filter((a) => a.rentable && a.verified && fitsTemplate(a, findTemplate(template)!, LLM_DISK_GB));
  expect(fitting.length).toBeGreaterThan(0);
  fitting.forEach((ask, i) => (ask.dph_base = 0.01 + i * 0.001));
  return fitting.length;
}

describe("capacity.markets", () => {
  it("answers 400 naming capacity.markets for a market not configured, on POST and PATCH, and changes nothing", async () => {
    const post = await rest<{ field: string; detail: string }>(url(), "POST", "/api/gpu/endpoints", {
      name: "mk-bad",
      template_name: "budget",
      replicas: 0,
      max_cost_per_hour: 1,
      capacity: { markets: ["vastai", "runpod"] },
    });
    expect(post.status).toBe(400);
    expect(post.body).toMatchObject({ field: "capacity.markets", detail: expect.stringMatching(/'runpod'.*configured: vastai, simulated/) });
    expect((await rest(url(), "GET", "/api/gpu/endpoints/mk-bad")).status).toBe(404);

    await createEndpoint(url(), { name: "mk-patch", template_name: "budget", replicas: 0, max_cost_per_hour: 1 });
    const patch = await rest<{ field: string }>(url(), "PATCH", "/api/gpu/endpoints/mk-patch", { capacity: { markets: ["aws"] } });
    expect(patch.status).toBe(400);
    expect(patch.body.field).toBe("capacity.markets");
    const patched = await rest<{ capacity: { markets: string[] } }>(url(), "PATCH", "/api/gpu/endpoints/mk-patch", { capacity: { markets: ["simulated"] } });
    expect(patched.status).toBe(200);
    expect(patched.body.capacity.markets).toEqual(["simulated"]);
    const row = await service.db.knex("gpu_endpoints").where({ name: "mk-patch" }).first();
    expect(row.capacity_markets).toEqual(["simulated"]);
    // `capacity: null` puts the defaults back: every market.
    const reset = await rest<{ capacity: { markets?: string[] } }>(url(), "PATCH", "/api/gpu/endpoints/mk-patch", { capacity: null });
    expect(reset.body.capacity.markets ?? []).toEqual([]);
    await deleteAndWait(url(), "mk-patch", service.db.knex);
  });

  it("rents an endpoint's replicas only from its markets, though the other market is cheaper", async () => {
    makeVastCheapest("budget");
    const created = await createEndpoint(url(), {
      name: "mk-narrow",
      template_name: "budget",
      replicas: 2,
      max_cost_per_hour: 10,
      capacity: { markets: ["simulated"] },
    });
    expect(created.capacity).toMatchObject({ markets: ["simulated"] });
    const ready = await waitForEndpoint(url(), "mk-narrow", "ready", (e) => readyIds(e).length === 2, 30_000);
    for (const id of readyIds(ready)) expect(await marketOf(id)).toBe("simulated");
    await deleteAndWait(url(), "mk-narrow", service.db.knex);
  });

  it("moves running replicas out of a market a PATCH of capacity.markets leaves out, one at a time, never fewer ready than the target", async () => {
    makeVastCheapest("budget");
    await createEndpoint(url(), { name: "mk-move", template_name: "budget", replicas: 2, max_cost_per_hour: 10 });
    const before = await waitForEndpoint(url(), "mk-move", "two ready on vast.ai", (e) => readyIds(e).length === 2, 30_000);
    const onVast = readyIds(before);
    for (const id of onVast) expect(await marketOf(id)).toBe("vastai");

    expect((await rest(url(), "PATCH", "/api/gpu/endpoints/mk-move", { capacity: { markets: ["simulated"] } })).status).toBe(200);
    let fewestReady = 2;
    let mostMachines = 0;
    const moved = await waitForEndpoint(
      url(),
      "mk-move",
      "both replicas on the simulated market",
      (e) => {
        const live = (e.instances ?? []).filter((i) => i.state !== "gone");
        mostMachines = Math.max(mostMachines, live.length);
        fewestReady = Math.min(fewestReady, readyIds(e).length);
        return readyIds(e).length === 2 && live.length === 2 && readyIds(e).every((id) => !onVast.includes(id));
      },
      60_000,
    );
    for (const id of readyIds(moved)) expect(await marketOf(id)).toBe("simulated");
    expect(fewestReady).toBe(2);
    expect(mostMachines).toBeLessThanOrEqual(3);
    const events = await eventsOf(url(), "mk-move");
    for (const id of onVast) {
      expect(events.some((e) => e.kind === "launched" && e.detail.includes(`to take ${id}'s place`))).toBe(true);
      expect(events.find((e) => e.instance_id === id && /vastai is no longer among them/.test(e.detail))).toBeDefined();
    }
    await deleteAndWait(url(), "mk-move", service.db.knex);
  }, 90_000);
});

describe("one market's failure", () => {
  it("heals a launch refused in vast.ai on the simulated market in the same round, with no launch backoff", async () => {
    // More fitting vast.ai offers than a creation tries (5): the whole creation fails in vast.ai.
    expect(makeVastCheapest("budget")).toBeGreaterThan(5);
    let creates = 0;
    service.vast.onCreate(() => {
      creates++;
      service.vast.refuseNextCreate("gone");
    });
    await createEndpoint(url(), { name: "mk-heal", template_name: "budget", replicas: 1, max_cost_per_hour: 10 });
    const ready = await waitForEndpoint(url(), "mk-heal", "ready", (e) => readyIds(e).length === 1, 30_000);
    const [replica] = readyIds(ready) as [string];
    expect(await marketOf(replica)).toBe("simulated");
    expect(creates).toBe(5);
    // vast.ai backs off alone: the next launch (a scale-up) goes straight to the simulated market.
    expect((await rest(url(), "PATCH", "/api/gpu/endpoints/mk-heal", { replicas: 2 })).status).toBe(200);
    const two = await waitForEndpoint(url(), "mk-heal", "2 ready", (e) => readyIds(e).length === 2, 30_000);
    for (const id of readyIds(two)) expect(await marketOf(id)).toBe("simulated");
    expect(creates).toBe(5);
    const events = await eventsOf(url(), "mk-heal");
    const failed = events.filter((e) => e.kind === "launch_failed");
    expect(failed).toHaveLength(1);
    expect(failed[0]!.detail).toMatch(/failed in vastai: .*; trying simulated now$/);
    // The replica launched right after, in the same round: no backoff was raised.
    expect(events.find((e) => e.kind === "launched")!.instance_id).toBe(replica);
    const row = await service.db.knex("gpu_endpoints").where({ name: "mk-heal" }).first();
    expect(row.launch_failures).toBe(0);
    await deleteAndWait(url(), "mk-heal", service.db.knex);
  });

  it("heals a replica lost while vast.ai is dry on the simulated market, with no launch failure", async () => {
    makeVastCheapest("budget");
    await createEndpoint(url(), { name: "mk-dry", template_name: "budget", replicas: 1, max_cost_per_hour: 10 });
    const [first] = readyIds(await waitForEndpoint(url(), "mk-dry", "ready", (e) => readyIds(e).length === 1, 30_000)) as [string];
    expect(await marketOf(first)).toBe("vastai");
    // vast.ai runs dry (no rentable offer), then the replica's model server dies: it is replaced.
    for (const ask of service.vast.asks) ask.rentable = false;
    const machine = (await service.db.knex("gpu_instances").where({ instance_id: first }).first()).market_instance_id as string;
    await service.vast.instances.get(Number(machine.replace(/^vastai:/, "")))!.server!.close();
    const healed = await waitForEndpoint(url(), "mk-dry", "healed", (e) => readyIds(e).length === 1 && !readyIds(e).includes(first), 30_000);
    expect(await marketOf(readyIds(healed)[0]!)).toBe("simulated");
    expect((await eventsOf(url(), "mk-dry")).filter((e) => e.kind === "launch_failed")).toEqual([]);
    await deleteAndWait(url(), "mk-dry", service.db.knex);
  });

  it("backs the launch off when every allowed market failed", async () => {
    expect(makeVastCheapest("budget")).toBeGreaterThan(5);
    service.vast.onCreate(() => service.vast.refuseNextCreate("gone"));
    await createEndpoint(url(), { name: "mk-only", template_name: "budget", replicas: 1, max_cost_per_hour: 10, capacity: { markets: ["vastai"] } });
    await waitFor("a launch_failed event", async () => ((await eventsOf(url(), "mk-only")).some((e) => e.kind === "launch_failed") ? true : undefined), 20_000);
    const failed = (await eventsOf(url(), "mk-only")).find((e) => e.kind === "launch_failed")!;
    expect(failed.detail).toMatch(/next launch in 10 s$/);
    expect(failed.detail).not.toMatch(/trying/);
    await deleteAndWait(url(), "mk-only", service.db.knex);
  });
});

describe("capacity.spread_markets", () => {
  it("spreads replicas over both markets when their prices are within 25%, and keeps them in the cheapest without it", async () => {
    // The simulated market's price for the template, as a launch there rents it.
    await createEndpoint(url(), { name: "mk-probe", template_name: "budget", replicas: 1, max_cost_per_hour: 10, capacity: { markets: ["simulated"] } });
    const probed = await waitForEndpoint(url(), "mk-probe", "launched", (e) => (e.instances ?? []).some((i) => i.cost_per_hour > 0), 30_000);
    const simulatedPrice = probed.instances!.find((i) => i.cost_per_hour > 0)!.cost_per_hour;
    await deleteAndWait(url(), "mk-probe", service.db.knex);
    // vast.ai a little cheaper (95%): the cheapest market, with the simulated one within 25% of it.
    saved = service.vast.asks.map((a) => ({ ...a }));
    const fitting = service.vast.asks.filter((a) => a.rentable && a.verified && fitsTemplate(a, findTemplate("budget")!, LLM_DISK_GB));
    fitting.forEach((ask, i) => Object.assign(ask, { dph_base: simulatedPrice * 0.95 + i * 0.0001, storage_cost: 0 }));

    const markets = async (name: string) => {
      const ready = await waitForEndpoint(url(), name, "4 ready", (e) => readyIds(e).length === 4, 40_000);
      return Promise.all(readyIds(ready).map(marketOf));
    };
    const create = (name: string, spread: boolean) =>
      createEndpoint(url(), { name, template_name: "budget", replicas: 4, max_cost_per_hour: 20, capacity: { spread_markets: spread } });
    const spread = await create("mk-spread", true);
    expect(spread.capacity).toMatchObject({ spread_markets: true });
    const spreadOn = await markets("mk-spread");
    expect(spreadOn.filter((m) => m === "vastai")).toHaveLength(2);
    expect(spreadOn.filter((m) => m === "simulated")).toHaveLength(2);
    await deleteAndWait(url(), "mk-spread", service.db.knex);

    await create("mk-cheapest", false);
    expect(await markets("mk-cheapest")).toEqual(["vastai", "vastai", "vastai", "vastai"]);
    await deleteAndWait(url(), "mk-cheapest", service.db.knex);
  });
});

describe("validCapacity over markets", () => {
  const configured = {
    markets: [
      { market: "vastai", interruptible: true },
      { market: "runpod", interruptible: false },
    ],
  };
  const fieldOf = (run: () => unknown) => {
    try {
      run();
    } catch (err) {
      return (err as { extra?: { field?: string } }).extra?.field;
    }
    return undefined;
  };

  it("keeps each named market once, in the order given", () => {
    expect(validCapacity({ markets: ["runpod", "vastai", "runpod"] }, configured).markets).toEqual(["runpod", "vastai"]);
    expect(validCapacity({}, configured).markets).toEqual([]);
  });

  it("refuses interruptible replicas when only markets that rent no bids are allowed, naming capacity.markets", () => {
    expect(fieldOf(() => validCapacity({ interruptible: true, markets: ["runpod"] }, configured))).toBe("capacity.markets");
    expect(validCapacity({ interruptible: true, markets: ["runpod", "vastai"] }, configured).interruptible).toBe(true);
    expect(fieldOf(() => validCapacity({ interruptible: true }, { markets: [configured.markets[1]!] }))).toBe("capacity.interruptible");
  });
});

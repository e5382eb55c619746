import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { QUICK_MARKET_ENV, startMarketService, type MarketService } from "../../../support/markets/market-service.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV } from "../../endpoints/helpers.js";
import { rest, waitFor } from "../../helpers.js";

// RunPod's prices on the basis vast.ai's dph_total is on (MARKETPLACE=runpod, its emulator, the
// real PostgreSQL): an offer and a pod bill their container disk at $0.10 per GB-month beside
// RunPod's own price, and the fleet cap and an endpoint's budget hold for what a created pod
// really bills (the emulator bills pods above their catalogue price) as well as for its offer.

const API_KEY = "rpa_prices_0123456789";
const FLEET_CAP = 0.8;
/** $/h of a GB of container disk: $0.10 a month of 730 hours. */
const DISK_GB_HOUR = 0.1 / 730;
/** The research template's machine on RunPod: two Community Cloud RTX 4090s at $0.34 each, with the 100 GB a model server's pod asks for. */
const RESEARCH_OFFER = "community-2x-NVIDIA_GeForce_RTX_4090";
const RESEARCH_RATE = 0.68 + 100 * DISK_GB_HOUR;

let service: MarketService;
const url = () => service.server.url;
const runpod = () => service.runpod!;
const record = (id: string) => service.db.knex("gpu_instances").where({ instance_id: id }).first();

beforeAll(async () => {
  service = await startMarketService({
    runpod: { apiKey: API_KEY, provisioningMs: 100, startingMs: 100 },
    env: { MARKETPLACE: "runpod", ...QUICK_MARKET_ENV, ...FAST_ENDPOINT_ENV, GPU_MAX_FLEET_DPH: String(FLEET_CAP) },
  });
});

afterAll(async () => {
  await service?.close();
  expect(runpod().breaches).toEqual([]);
});

afterEach(() => runpod().billAbove(0));

describe("RunPod's prices with their container disk", () => {
  it("prices an offer with the disk a create would ask for, and a pod's cost_per_hour with its own", async () => {
    const search = await rest<{ offers: Array<{ id: string; dph_total: number }> }>(url(), "POST", "/api/gpu/search-offers", { gpu_name: "4090", num_gpus: 2 });
    expect(search.status).toBe(200);
    // A search prices the 16 GB a machine without a template gets.
    expect(search.body.offers.find((o) => o.id === RESEARCH_OFFER)!.dph_total).toBeCloseTo(0.68 + 16 * DISK_GB_HOUR, 6);

    const created = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances/from-template?template_name=research");
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    expect(await record(id)).toMatchObject({ offer_id: RESEARCH_OFFER, status: "creating" });
    expect((await record(id)).cost_per_hour).toBeCloseTo(RESEARCH_RATE, 6);
    const cost = await rest<{ cost_per_hour: number; cost_includes: string }>(url(), "GET", `/api/gpu/instances/${id}/cost-analysis`);
    expect(cost.body.cost_per_hour).toBeCloseTo(RESEARCH_RATE, 4);
    expect(cost.body.cost_includes).toMatch(/container disk at \$0\.10 per GB-month/);
    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });

  it("destroys a pod that bills over the fleet cap, though its offer fitted, answering 429 naming GPU_MAX_FLEET_DPH", async () => {
    runpod().billAbove(0.2);
    const podsBefore = runpod().pods.size;
    const refused = await rest<{ detail: string; fleet_cap: number; cost_per_hour: number }>(url(), "POST", "/api/gpu/instances/from-template?template_name=research");
    expect(refused.status).toBe(429);
    expect(refused.body.detail).toMatch(/^The fleet cap GPU_MAX_FLEET_DPH of \$0\.8\/h leaves no room for the machine rented for gpu-\d+: it bills \$0\.8937\/h/);
    expect(refused.body).toMatchObject({ fleet_cap: FLEET_CAP, cost_per_hour: 0.8937 });

    // The pod was rented and deleted; its record failed, with the reason in its log.
    const created = runpod().requests.filter((r) => r.method === "POST" && r.path === "/v2/pods");
    const podName = (created.at(-1)!.body as { name: string }).name;
    expect(runpod().pods.size).toBe(podsBefore);
    expect([...runpod().pods.values()].some((p) => p.name === podName)).toBe(false);
    const failed = await service.db.knex("gpu_instances").where({ status: "failed" }).orderBy("created_at", "desc").first();
    expect(podName).toContain(failed.instance_id);
    const logs = await service.db.knex("GpuExecutionLog").where({ instance_id: failed.instance_id, operation: "create_instance" });
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatchObject({ success: false, result: expect.stringMatching(/GPU_MAX_FLEET_DPH.*is destroyed$/) });
  });

  it("destroys an endpoint's replica that bills over what is left of its budget, saying max_cost_per_hour, and heals when pods bill as listed", async () => {
    runpod().billAbove(0.2);
    await createEndpoint(url(), { name: "rp-budget", template_name: "research", replicas: 1, max_cost_per_hour: 0.75 });
    const refused = await waitFor(
      "a launch refused for its budget",
      async () => (await eventsOf(url(), "rp-budget")).find((e) => e.kind === "launch_failed"),
      20_000,
    );
    expect(refused.detail).toMatch(/bills \$0\.8937\/h, above the \$0\.75\/h left of endpoint 'rp-budget''s max_cost_per_hour/);
    const instanceId = refused.instance_id!;
    expect(await record(instanceId)).toMatchObject({ status: "failed" });
    const podName = (runpod().requests.find((r) => r.method === "POST" && (r.body as { name: string }).name.includes(instanceId))!.body as { name: string }).name;
    expect([...runpod().pods.values()].some((p) => p.name === podName)).toBe(false);

    runpod().billAbove(0);
    const launched = await waitFor(
      "a replica launched at its listed price",
      async () => (await eventsOf(url(), "rp-budget")).find((e) => e.kind === "launched"),
      30_000,
    );
    expect((await record(launched.instance_id!)).cost_per_hour).toBeCloseTo(RESEARCH_RATE, 6);
    await deleteAndWait(url(), "rp-budget", service.db.knex);
  }, 60_000);
});

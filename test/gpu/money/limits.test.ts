import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { gpuClient, rest, waitFor } from "../helpers.js";

// Per-instance limits: custom_config max_hours and max_cost. The sync loop destroys an instance
// that reached one, with one auto_destroy log record naming it; enhanced status and cost
// analysis show the limits and what is left. Limits of a few seconds stand for hours.

let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { GPU_STATUS_SYNC_MS: "50" } });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
});

const HOUR_MS = 3_600_000;
const record = (id: string) => db.knex("gpu_instances").where({ instance_id: id }).first();
const autoDestroys = (id: string) => db.knex("GpuExecutionLog").where({ instance_id: id, operation: "auto_destroy" });

async function create(customConfig: Record<string, unknown>): Promise<string> {
  const res = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget", {
    custom_config: customConfig,
  });
  expect(res.status).toBe(200);
  return res.body.instance_id;
}

async function destroyedBySyncLoop(id: string): Promise<Record<string, unknown>> {
  return waitFor(`${id} destroyed`, async () => ((await record(id)).status === "destroyed" ? record(id) : undefined), 15_000);
}

describe("max_hours", () => {
  it("shows the time left, then destroys the instance once its uptime reaches the limit, with one auto_destroy record", async () => {
    const maxHours = 1.5 / 3600;
    const id = await create({ max_hours: maxHours });

    const enhanced = await rest<{ data: { limits: Record<string, number> } }>(server.url, "GET", `/api/gpu/instances/${id}/enhanced`);
    expect(Object.keys(enhanced.body.data.limits).sort()).toEqual(["hours_left", "max_hours"]);
    expect(enhanced.body.data.limits.max_hours).toBe(maxHours);
    expect(enhanced.body.data.limits.hours_left).toBeGreaterThan(0);
    expect(enhanced.body.data.limits.hours_left).toBeLessThanOrEqual(maxHours);

    const destroyed = await destroyedBySyncLoop(id);
    const uptimeMs = (destroyed.destroyed_at as Date).getTime() - (destroyed.created_at as Date).getTime();
    expect(uptimeMs).toBeGreaterThanOrEqual(maxHours * HOUR_MS);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const logs = await autoDestroys(id);
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatchObject({ success: true, metadata: expect.objectContaining({ limit: "max_hours" }) });
    expect(logs[0].result).toMatch(/^max_hours reached: up [\d.]+ h of [\d.e-]+ h; destroyed, confirmed by the marketplace$/);

    const after = await rest<{ data: { limits: Record<string, number> } }>(server.url, "GET", `/api/gpu/instances/${id}/enhanced`);
    expect(after.body.data.limits).toEqual({ max_hours: maxHours, hours_left: 0 });
  });
});

describe("max_cost", () => {
  it("shows the money left in cost analysis, then destroys the instance once its cost reaches the limit", async () => {
    const id = await create({});
    const costPerHour = (await record(id)).cost_per_hour as number;
    expect((await rest(server.url, "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
    // A limit worth two seconds of this offer's price.
    const maxCost = (costPerHour * 2) / 3600;
    const capped = await create({ max_cost: maxCost });

    const analysis = await rest<{ limits: Record<string, number>; total_cost: number }>(server.url, "GET", `/api/gpu/instances/${capped}/cost-analysis`);
    expect(analysis.body.limits.max_cost).toBe(maxCost);
    expect(analysis.body.limits.cost_left).toBeGreaterThanOrEqual(0);
    expect(analysis.body.limits.cost_left).toBeLessThanOrEqual(maxCost);
    expect(analysis.body.limits.max_hours).toBeUndefined();

    const destroyed = await destroyedBySyncLoop(capped);
    const uptimeMs = (destroyed.destroyed_at as Date).getTime() - (destroyed.created_at as Date).getTime();
    // The capped instance may rent another offer than the first: its own price counts.
    expect(((destroyed.cost_per_hour as number) * uptimeMs) / HOUR_MS).toBeGreaterThanOrEqual(maxCost * 0.9999);
    const logs = await autoDestroys(capped);
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatchObject({ metadata: expect.objectContaining({ limit: "max_cost" }) });
    expect(logs[0].result).toMatch(/^max_cost reached: cost \$[\d.]+ of \$[\d.e-]+; destroyed/);
    const after = await rest<{ limits: Record<string, number> }>(server.url, "GET", `/api/gpu/instances/${capped}/cost-analysis`);
    expect(after.body.limits).toEqual({ max_cost: maxCost, cost_left: 0 });
  });
});

describe("custom_config limits", () => {
  it("are stored with the record, also without a template, and reported over RPC", async () => {
    const offer = (await server.marketplace.listOffers()).find((o) => o.rentable && o.dphTotal < 0.4)!;
    const res = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances", {
      offer_id: offer.id,
      custom_config: { max_hours: 48, max_cost: 20 },
    });
    expect(res.status).toBe(200);
    expect(await record(res.body.instance_id)).toMatchObject({ max_hours: 48, max_cost: 20 });
    const analysis = await gpuClient(server.url).getCostAnalysis({ instanceId: res.body.instance_id });
    expect(analysis.limits).toMatchObject({ maxHours: 48, maxCost: 20 });
    expect(analysis.limits!.hoursLeft).toBeCloseTo(48, 2);
    expect(analysis.limits!.costLeft).toBeCloseTo(20, 2);
  });

  it.each([[{ max_hours: 0 }], [{ max_cost: -5 }], [{ max_hours: "2" }]])("answers 400 for %j and creates nothing", async (customConfig) => {
    const before = await db.knex("gpu_instances").count<Array<{ n: string }>>("* as n");
    const res = await rest<{ detail: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget", {
      custom_config: customConfig,
    });
    expect(res.status).toBe(400);
    expect(res.body.detail).toContain("max_hours (number > 0), max_cost");
    expect(await db.knex("gpu_instances").count<Array<{ n: string }>>("* as n")).toEqual(before);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { gpuClient, rest } from "./helpers.js";
import { HOUR, seedInstances, type SeedInstance } from "./seed.js";

// Enhanced status, cost analysis and statistics over records inserted with known timestamps;
// every expected value is computed here from those inputs.

let db: TestDatabase;
let server: TestServer;
const now = Date.now();
const UPTIME_26_03_04 = (26 * 3600 + 3 * 60 + 4) * 1000;

const finished: SeedInstance[] = [
  { id: "gpu-1", status: "destroyed", gpuName: "RTX 4090", costPerHour: 0.37, createdAt: new Date(now - 40 * HOUR), destroyedAt: new Date(now - 40 * HOUR + UPTIME_26_03_04), templateName: "budget" },
  { id: "gpu-2", status: "destroyed", gpuName: "A100 SXM4", costPerHour: 1.45, createdAt: new Date(now - 10 * HOUR), destroyedAt: new Date(now - 7.5 * HOUR) },
  { id: "gpu-3", status: "failed", gpuName: "RTX 4090", costPerHour: 0.41, createdAt: new Date(now - 5 * HOUR), destroyedAt: undefined },
  { id: "gpu-4", status: "exited", gpuName: "L40S", costPerHour: 0.9, createdAt: new Date(now - 3 * HOUR) },
];
const live: SeedInstance[] = [
  { id: "gpu-5", status: "running_llm", gpuName: "RTX 4090", costPerHour: 0.5, createdAt: new Date(now - 2 * HOUR), templateName: "research" },
  { id: "gpu-6", status: "running", gpuName: "H100 SXM", costPerHour: 2.5, createdAt: new Date(now - 1 * HOUR) },
  { id: "gpu-7", status: "loading", gpuName: "A100 SXM4", costPerHour: 1.3, createdAt: new Date(now - 0.25 * HOUR) },
];
const all = [...finished, ...live];

beforeAll(async () => {
  db = await createTestDatabase();
  // One sync round at start, on the empty database, then none during the test.
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { GPU_STATUS_SYNC_MS: "86400000" } });
  await seedInstances(db.knex, all);
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
});

const round = (value: number, decimals: number) => Math.round(value * 10 ** decimals) / 10 ** decimals;

describe("GET /api/gpu/instances/{id}/cost-analysis", () => {
  it("computes total, days, daily and monthly cost from the stored times", async () => {
    const res = await rest(server.url, "GET", "/api/gpu/instances/gpu-1/cost-analysis");
    expect(res.status).toBe(200);
    const hours = UPTIME_26_03_04 / HOUR;
    expect(res.body).toEqual({
      instance_id: "gpu-1",
      cost_per_hour: 0.37,
      total_cost: round(0.37 * hours, 4),
      uptime_hours: round(hours, 4),
      cost_breakdown: {
        hourly_rate: 0.37,
        uptime_days: round(hours / 24, 1),
        estimated_daily_cost: round(0.37 * 24, 4),
        estimated_monthly_cost: round(0.37 * 24 * 30, 4),
      },
      limits: {},
      cost_includes: "the simulated price per hour of the whole machine (dph_total, or the bid of an interruptible one), over the uptime; nothing is billed",
    });
  });

  it("runs a live instance's uptime to now", async () => {
    const res = await rest<{ uptime_hours: number; total_cost: number }>(server.url, "GET", "/api/gpu/instances/gpu-6/cost-analysis");
    const hours = (Date.now() - live[1]!.createdAt.getTime()) / HOUR;
    expect(res.body.uptime_hours).toBeCloseTo(hours, 2);
    expect(res.body.total_cost).toBeCloseTo(2.5 * hours, 2);
  });

  it("answers 404 for an unknown instance", async () => {
    expect((await rest(server.url, "GET", "/api/gpu/instances/gpu-404/cost-analysis")).status).toBe(404);
  });
});

describe("GET /api/gpu/instances/{id}/enhanced", () => {
  it("reports the stored record with H:MM:SS uptime past 24 hours", async () => {
    const res = await rest(server.url, "GET", "/api/gpu/instances/gpu-1/enhanced");
    expect(res).toEqual({
      status: 200,
      body: {
        success: true,
        data: {
          instance_id: "gpu-1",
          basic_status: { status: "destroyed", public_ip: "" },
          llm_status: { running: false, port: 8000 },
          db_info: {
            status: "destroyed",
            cost_per_hour: 0.37,
            gpu_info: { gpu_name: "RTX 4090", num_gpus: 1, gpu_ram: 24 },
            uptime: "26:03:04",
            interruptible: false,
          },
          limits: {},
        },
      },
    });
  });
});

describe("GET /api/gpu/statistics", () => {
  it("counts by status and GPU and sums cost as computed from the inserted records", async () => {
    const res = await rest<Record<string, unknown>>(server.url, "GET", "/api/gpu/statistics");
    const at = Date.now();
    const cost = (i: SeedInstance) => (i.costPerHour * ((i.destroyedAt?.getTime() ?? at) - i.createdAt.getTime())) / HOUR;
    const count = (key: (i: SeedInstance) => string) =>
      all.reduce<Record<string, number>>((acc, i) => ({ ...acc, [key(i)]: (acc[key(i)] ?? 0) + 1 }), {});
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      total_instances: 7,
      active_instances: 2 + 1,
      destroyed_instances: 2,
      average_cost_per_hour: round(all.reduce((s, i) => s + i.costPerHour, 0) / all.length, 4),
      gpu_distribution: count((i) => i.gpuName),
      status_distribution: count((i) => i.status),
    });
    expect(res.body.total_cost).toBeCloseTo(all.reduce((s, i) => s + cost(i), 0), 2);
  });

  it("answers the same over the generated Connect client", async () => {
    const stats = await gpuClient(server.url).getStatistics({});
    expect(stats.totalInstances).toBe(7);
    expect(stats.gpuDistribution).toEqual({ "RTX 4090": 3, "A100 SXM4": 2, L40S: 1, "H100 SXM": 1 });
    expect(stats.statusDistribution.destroyed).toBe(2);
  });
});

describe("GET /api/gpu/instances/{id}/logs", () => {
  it("lists an instance's log records newest first, bounded by limit", async () => {
    await db.knex("GpuExecutionLog").insert(
      [1, 2, 3].map((n) => ({ instance_id: "gpu-5", operation: "status_change", result: `change ${n}`, success: true })),
    );
    const res = await rest<{ logs: Array<{ result: string; operation: string; success: boolean }> }>(
      server.url,
      "GET",
      "/api/gpu/instances/gpu-5/logs?limit=2",
    );
    expect(res.status).toBe(200);
    expect(res.body.logs.map((l) => l.result)).toEqual(["change 3", "change 2"]);
    expect((await rest(server.url, "GET", "/api/gpu/instances/gpu-5/logs?limit=0")).status).toBe(400);
    expect((await rest(server.url, "GET", "/api/gpu/instances/gpu-404/logs")).status).toBe(404);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { MODEL } from "../../support/endpoint-proxy.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { gpuClient, rest, waitFor } from "../helpers.js";
import { HOUR, seedInstances } from "../seed.js";
import { createEndpoint, FAST_ENDPOINT_ENV, waitForEndpoint } from "../endpoints/helpers.js";

// The history routes over REST and Connect, on two service processes sharing one database: an
// endpoint's requests through both proxies are in its history once, the fleet's spend follows
// the instance records, and bad input is a 400 naming the field.

interface PointJson {
  at: string;
  load: number;
  ready_replicas: number;
  target_replicas: number;
  requests: Record<string, number>;
  first_byte_p50_ms?: number;
  first_byte_p99_ms?: number;
  cost_per_hour: number;
}

let db: TestDatabase;
let market: SimulatedMarketplace;
let a: TestServer;
let b: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  market = createSimulatedMarketplace({ creatingMs: 100, loadingMs: 100, modelServerStartMs: 100 });
  const start = () => startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: market, env: FAST_ENDPOINT_ENV });
  a = await start();
  b = await start();
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await market?.close();
  await db?.drop();
});

const chat = (server: TestServer, path = "/endpoints/chat/v1/chat/completions") =>
  fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
  });

describe("GET /api/gpu/endpoints/{name}/history", () => {
  it("counts a minute's requests through two processes once, with the replicas and the cost", async () => {
    await createEndpoint(a.url, { name: "chat", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(b.url, "chat", "ready", (e) => e.state === "ready", 30_000);
    // All in one minute, and early enough in it that the test knows which minute: the six requests
    // below (ten tokens each, at once) take well under the 10 s left at worst.
    if (Date.now() % 60_000 > 50_000) await new Promise((resolve) => setTimeout(resolve, 60_000 - (Date.now() % 60_000) + 100));
    const minuteEnd = Math.ceil(Date.now() / 60_000) * 60_000;
    const answers = await Promise.all([chat(a), chat(a), chat(a), chat(b), chat(b), chat(b, "/endpoints/chat/v1/no-such-route")]);
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 404]);

    const point = await waitFor(
      "the minute's sample",
      async () => {
        const res = await rest<{ points: PointJson[] }>(b.url, "GET", "/api/gpu/endpoints/chat/history");
        return res.body.points.find((p) => Date.parse(p.at) === minuteEnd);
      },
      75_000,
    );
    expect(point.requests).toEqual({ ok: 5, client_error: 1, server_error: 0, held: 0, continued: 0, cut: 0 });
    expect(point.ready_replicas).toBe(1);
    expect(point.target_replicas).toBe(1);
    expect(point.cost_per_hour).toBe(ready.cost_per_hour);
    expect(point.first_byte_p50_ms).toBeGreaterThan(0);
    expect(point.first_byte_p99_ms).toBeGreaterThanOrEqual(point.first_byte_p50_ms!);

    // The typed client reads the same history.
    const viaConnect = await gpuClient(a.url).getEndpointHistory({ name: "chat" });
    const same = viaConnect.points.find((p) => Number(p.at!.seconds) * 1000 === minuteEnd)!;
    expect(same.requests).toMatchObject({ ok: 5, clientError: 1 });
    expect(viaConnect.stepS).toBe(60);
  }, 120_000);

  it.each([
    ["from=2026-01-01T00:00:00Z&to=2025-12-31T00:00:00Z", "to"],
    [`from=${new Date(Date.now() - 8 * 24 * HOUR).toISOString()}`, "from"],
    ["from=yesterday", "from"],
    ["to=2026-13-01T00:00:00Z", "to"],
    ["step_s=90", "step_s"],
    ["step_s=0", "step_s"],
    ["step_s=abc", "step_s"],
    ["since=1", "since"],
  ])("answers %s with a 400 naming %s", async (query, field) => {
    const res = await rest<{ detail: string; field: string }>(a.url, "GET", `/api/gpu/endpoints/chat/history?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
  });

  it("answers 404 for an endpoint that never was", async () => {
    const res = await rest<{ detail: string }>(a.url, "GET", "/api/gpu/endpoints/nobody/history");
    expect(res.status).toBe(404);
    expect(res.body.detail).toBe("Endpoint 'nobody' not found");
  });

  it("chooses a step that gives at most 1,440 points", async () => {
    const week = await rest<{ step_s: number }>(a.url, "GET", `/api/gpu/endpoints/chat/history?from=${new Date(Date.now() - 7 * 24 * HOUR).toISOString()}`);
    expect(week.body.step_s).toBe(420);
    const day = await rest<{ step_s: number }>(a.url, "GET", `/api/gpu/endpoints/chat/history?from=${new Date(Date.now() - 24 * HOUR).toISOString()}`);
    expect(day.body.step_s).toBe(60);
  });
});

describe("GET /api/gpu/spend", () => {
  it("gives the fleet's $/h at each step's end and what it cost since from", async () => {
    const to = Math.floor(Date.now() / HOUR) * HOUR;
    await seedInstances(db.knex, [
      { id: "gpu-900001", status: "destroyed", gpuName: "RTX 4090", costPerHour: 1, createdAt: new Date(to - 2.5 * HOUR), destroyedAt: new Date(to - 1.5 * HOUR) },
      { id: "gpu-900002", status: "running", gpuName: "RTX 4090", costPerHour: 0.5, createdAt: new Date(to - 0.5 * HOUR) },
    ]);
    // Only the seeded records bill before the endpoint's replica: a window that ends before it.
    const from = new Date(to - 3 * HOUR).toISOString();
    const res = await rest<{ points: Array<{ at: string; cost_per_hour: number; total_cost: number }>; step_s: number }>(
      a.url,
      "GET",
      `/api/gpu/spend?from=${from}&to=${new Date(to).toISOString()}&step_s=3600`,
    );
    expect(res.status).toBe(200);
    // Any other record (the endpoint's replica, when the test above ran) bills the same way.
    const others = (await db.knex("gpu_instances").whereNotIn("instance_id", ["gpu-900001", "gpu-900002"])) as Array<{ created_at: Date; destroyed_at: Date | null; cost_per_hour: number }>;
    const end = (r: (typeof others)[0]) => r.destroyed_at?.getTime() ?? Infinity;
    const replicaCost = (ms: number) => others.filter((r) => r.created_at.getTime() <= ms && end(r) > ms).reduce((sum, r) => sum + r.cost_per_hour, 0);
    const replicaTotal = (ms: number) =>
      others.reduce((sum, r) => sum + (Math.max(0, Math.min(end(r), ms) - Math.max(r.created_at.getTime(), to - 3 * HOUR)) / HOUR) * r.cost_per_hour, 0);
    const round = (n: number) => Math.round(n * 10_000) / 10_000;
    expect(res.body.points.map((p) => ({ ...p, at: Date.parse(p.at) }))).toEqual([
      { at: to - 2 * HOUR, cost_per_hour: round(1 + replicaCost(to - 2 * HOUR)), total_cost: round(0.5 + replicaTotal(to - 2 * HOUR)) },
      { at: to - HOUR, cost_per_hour: round(replicaCost(to - HOUR)), total_cost: round(1 + replicaTotal(to - HOUR)) },
      { at: to, cost_per_hour: round(0.5 + replicaCost(to)), total_cost: round(1.25 + replicaTotal(to)) },
    ]);
  });

  it("answers a read that outlasts API_READ_TIMEOUT_MS with a 503 that says so, and the next read once the database answers", async () => {
    const c = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env: { API_READ_TIMEOUT_MS: "200" } });
    const holder = await db.knex.transaction();
    try {
      // Another session holds the records: the read waits, and its statement timeout ends it.
      await holder.raw("lock table gpu_instances in access exclusive mode");
      const res = await rest<{ detail: string }>(c.url, "GET", "/api/gpu/spend");
      expect(res.status).toBe(503);
      expect(res.body.detail).toBe("the database took longer than 200 ms to answer this read (API_READ_TIMEOUT_MS); try again shortly");
    } finally {
      await holder.rollback();
    }
    try {
      expect((await rest(c.url, "GET", "/api/gpu/spend")).status).toBe(200);
    } finally {
      await c.close();
    }
  });

  it("answers a from after to with a 400 naming to", async () => {
    const res = await rest<{ field: string }>(a.url, "GET", "/api/gpu/spend?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z");
    expect(res.status).toBe(400);
    expect(res.body.field).toBe("to");
  });
});

import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, type TestServer } from "../../support/server.js";
import { gpuClient, rest, templateOffers } from "../helpers.js";

// GPU_MAX_FLEET_DPH bounds the summed cost_per_hour of active instances. A create that would
// exceed it answers 429 naming the cap and the spend, rents nothing and logs one failed
// create_instance record; concurrent creates, on one or two replicas, never slip under it together.

const CAP = 2;
let db: TestDatabase;
let marketplace: SimulatedMarketplace;
const servers: TestServer[] = [];

beforeAll(async () => {
  db = await createTestDatabase({ poolMax: 20 });
  marketplace = createFastSimulatedMarketplace();
  for (let i = 0; i < 2; i++) {
    servers.push(
      await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace, env: { GPU_MAX_FLEET_DPH: String(CAP) } }),
    );
  }
});

afterAll(async () => {
  for (const server of servers) await server.close();
  await marketplace?.close();
  await db?.drop();
});

const ACTIVE = ["creating", "loading", "running", "running_llm"];

async function activeSpend(): Promise<number> {
  const [row] = await db.knex("gpu_instances").whereIn("status", ACTIVE).sum<Array<{ sum: number | null }>>("cost_per_hour as sum");
  return Number(row?.sum ?? 0);
}

const refusals = () => db.knex("GpuExecutionLog").where({ operation: "create_instance", success: false }).whereNull("instance_id");

async function destroyAll(): Promise<void> {
  for (const row of await db.knex("gpu_instances").whereIn("status", ACTIVE)) {
    expect((await rest(servers[0]!.url, "DELETE", `/api/gpu/instances/${row.instance_id}`)).status).toBe(200);
  }
}

describe("the fleet cap", () => {
  it("answers 429 naming the cap and the spend, rents nothing and logs one refused creation", async () => {
    const create = () => rest<{ detail: string }>(servers[0]!.url, "POST", "/api/gpu/instances/from-template?template_name=research");
    let answer = await create();
    while (answer.status === 200) answer = await create();

    expect(answer.status).toBe(429);
    const spend = await activeSpend();
    expect(spend).toBeLessThanOrEqual(CAP);
    expect(answer.body.detail).toContain(`GPU_MAX_FLEET_DPH of $${CAP}/h`);
    expect(answer.body.detail).toContain(`active instances cost $${Math.round(spend * 10_000) / 10_000}/h`);
    expect(answer.body).toMatchObject({ fleet_cap: CAP, fleet_spend: Math.round(spend * 10_000) / 10_000 });

    const machines = (await marketplace.listInstances("gpu-")).length;
    const records = (await db.knex("gpu_instances").count<Array<{ n: string }>>("* as n"))[0]!.n;
    const refused = await refusals();
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ result: answer.body.detail, metadata: expect.objectContaining({ template_name: "research", fleet_cap: CAP }) });

    // The RPC answer is resource_exhausted, and it too rents and records nothing.
    await expect(gpuClient(servers[1]!.url).createInstance({ templateName: "research" })).rejects.toSatisfy(
      (err: unknown) => err instanceof ConnectError && err.code === Code.ResourceExhausted,
    );
    expect((await marketplace.listInstances("gpu-")).length).toBe(machines);
    expect((await db.knex("gpu_instances").count<Array<{ n: string }>>("* as n"))[0]!.n).toBe(records);
    expect(await refusals()).toHaveLength(2);
    await destroyAll();
  });

  it("holds under 24 concurrent creates spread over two replicas", async () => {
    const before = (await refusals()).length;
    const answers = await Promise.all(
      Array.from({ length: 24 }, (_, i) => rest(servers[i % 2]!.url, "POST", "/api/gpu/instances/from-template?template_name=budget")),
    );

    const statuses = answers.map((a) => a.status);
    expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
    expect(statuses).toContain(429);
    const spend = await activeSpend();
    expect(spend).toBeLessThanOrEqual(CAP);
    // Refused only when the next cheapest budget offer did not fit: a cap nearly reached.
    const cheapestLeft = templateOffers(await marketplace.listOffers(), "budget").map((o) => o.dphTotal);
    expect(spend + Math.min(...cheapestLeft)).toBeGreaterThan(CAP);
    expect((await refusals()).length - before).toBe(statuses.filter((s) => s === 429).length);
    await destroyAll();
  });

  it("frees room when instances are destroyed", async () => {
    expect(await activeSpend()).toBe(0);
    expect((await rest(servers[1]!.url, "POST", "/api/gpu/instances/from-template?template_name=budget")).status).toBe(200);
  });
});

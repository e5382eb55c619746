import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import type { SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, type TestServer } from "../../support/server.js";
import { rest } from "../helpers.js";

// An error answer never leaves a billed machine behind. The fault is real: a trigger makes the
// database refuse the write that completes the record after the marketplace rented the machine.
// The machine is destroyed (by the creation itself, or by the reconciler after a restart when the
// marketplace did not confirm), and the record ends failed with its log records.

let db: TestDatabase;
let simulated: SimulatedMarketplace;
const servers: TestServer[] = [];
/** Destroys the marketplace refuses before it confirms one again. */
let destroysToRefuse = 0;
/** Price the marketplace bills at rent time instead of the listed one, if set. */
let rentedPrice: number | undefined;

/**
 * The simulated marketplace, whose destroy can be made to fail as an unreachable marketplace
 * would, and which can rent at another price than it listed.
 */
function withFlakyDestroy(market: SimulatedMarketplace): Marketplace {
  return {
    ...market,
    async createInstance(request, signal) {
      const instance = await market.createInstance(request, signal);
      return rentedPrice === undefined ? instance : { ...instance, dphTotal: rentedPrice };
    },
    async destroyInstance(id, signal) {
      if (destroysToRefuse > 0) {
        destroysToRefuse--;
        throw new Error("connect ECONNREFUSED (injected)");
      }
      return market.destroyInstance(id, signal);
    },
  };
}

async function start(): Promise<TestServer> {
  const server = await startTestServer({
    knex: db.knex,
    elasticsearch: createTestElasticsearch(),
    marketplace: withFlakyDestroy(simulated),
    env: { GPU_STATUS_SYNC_MS: "86400000" },
  });
  servers.push(server);
  return server;
}

beforeAll(async () => {
  db = await createTestDatabase();
  simulated = createFastSimulatedMarketplace();
});

afterAll(async () => {
  for (const server of servers) await server.close();
  await simulated?.close();
  await db?.drop();
});

async function refuseCompletingWrites(on: boolean): Promise<void> {
  if (!on) {
    await db.knex.raw("drop trigger refuse_completion on gpu_instances");
    return;
  }
  await db.knex.raw(`
    create or replace function refuse_completion() returns trigger language plpgsql as $$
    begin
      if old.market_instance_id is null and new.market_instance_id is not null then
        raise exception 'injected fault: the completing write is refused';
      end if;
      return new;
    end $$`);
  await db.knex.raw("create trigger refuse_completion before update on gpu_instances for each row execute function refuse_completion()");
}

/** The instance_id a machine's label names (labels are `<deployment id>/<instance_id>`). */
const labelled = (label: string) => label.split("/").pop();
const machinesOf = async (id: string) => (await simulated.listInstances("")).filter((m) => labelled(m.label) === id);
const logsOf = (id: string) => db.knex("GpuExecutionLog").where({ instance_id: id }).orderBy("id");
const statistics = async (url: string) => (await rest<{ active_instances: number; total_cost: number; total_instances: number }>(url, "GET", "/api/gpu/statistics")).body;

describe("a creation whose completing write the database refuses", () => {
  it("destroys the rented machine, fails the record with its log records, and a retry rents one machine", async () => {
    const server = await start();
    const before = await statistics(server.url);
    await refuseCompletingWrites(true);

    const res = await rest<{ detail: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");

    expect(res.status).toBe(500);
    const [failed] = await db.knex("gpu_instances").where({ status: "failed" });
    expect(failed).toBeDefined();
    expect(await machinesOf(failed.instance_id)).toEqual([]);
    expect(failed.destroyed_at.getTime()).toBeGreaterThanOrEqual(failed.created_at.getTime());
    const logs = await logsOf(failed.instance_id);
    expect(logs.map((l) => [l.operation, l.success])).toEqual([
      ["create_instance", false],
      ["destroy_instance", true],
    ]);
    expect(logs[0].metadata.market_instance_id).toBe(logs[1].metadata.market_instance_id);

    // Its cost ended when it failed, in every figure a client reads.
    const uptimeHours = (failed.destroyed_at.getTime() - failed.created_at.getTime()) / 3_600_000;
    const analysis = await rest<{ total_cost: number }>(server.url, "GET", `/api/gpu/instances/${failed.instance_id}/cost-analysis`);
    expect(analysis.body.total_cost).toBeCloseTo(failed.cost_per_hour * uptimeHours, 4);
    const after = await statistics(server.url);
    expect(after.total_instances).toBe(before.total_instances + 1);
    expect(after.active_instances).toBe(before.active_instances);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await statistics(server.url)).total_cost).toBe(after.total_cost);
    const list = await rest<{ instances: Array<{ instance_id: string; total_cost: number }> }>(server.url, "GET", "/api/gpu/instances?status_filter=failed");
    expect(list.body.instances.find((i) => i.instance_id === failed.instance_id)?.total_cost).toBe(analysis.body.total_cost);
    expect(after.total_cost - before.total_cost).toBeCloseTo(analysis.body.total_cost, 4);

    await refuseCompletingWrites(false);
    const retry = await rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    expect(retry.status).toBe(200);
    expect(await machinesOf(retry.body.instance_id)).toHaveLength(1);
    expect((await simulated.listInstances("")).map((m) => labelled(m.label))).toEqual([retry.body.instance_id]);
  });

  it("leaves the destroy the marketplace did not confirm to the reconciler, which finishes it after a restart", async () => {
    const server = servers[0]!;
    await refuseCompletingWrites(true);
    destroysToRefuse = 3;

    const res = await rest(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");

    expect(res.status).toBe(500);
    const failed = await db.knex("gpu_instances").where({ status: "failed" }).orderBy("created_at", "desc").first();
    const [leaked] = await machinesOf(failed.instance_id);
    expect(leaked).toBeDefined();
    expect((await logsOf(failed.instance_id)).map((l) => [l.operation, l.success])).toEqual([
      ["create_instance", false],
      ["destroy_instance", false],
    ]);

    await refuseCompletingWrites(false);
    await server.close();
    servers.pop();
    await start();

    expect(await machinesOf(failed.instance_id)).toEqual([]);
    const logs = await logsOf(failed.instance_id);
    expect(logs.at(-1)).toMatchObject({ operation: "reconcile_destroy", success: true, command: `destroy ${leaked!.id}` });
    expect((await db.knex("gpu_instances").where({ instance_id: failed.instance_id }).first()).status).toBe("failed");
  });

  it("answers 400 naming max_price when the rented price breaks the template's cap, and destroys that machine", async () => {
    const server = servers[0]!;
    rentedPrice = 0.75;
    const res = await rest<{ detail: string; limit: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    rentedPrice = undefined;

    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ limit: "max_price" });
    expect(res.body.detail).toContain("costs $0.75/h, above the max_price of $0.5/h");
    const failed = await db.knex("gpu_instances").where({ status: "failed" }).orderBy("created_at", "desc").first();
    expect(await machinesOf(failed.instance_id)).toEqual([]);
    expect((await logsOf(failed.instance_id)).map((l) => [l.operation, l.success])).toEqual([
      ["create_instance", false],
      ["destroy_instance", true],
    ]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateToLatest } from "../../src/db/knex.js";
import { InstanceStore } from "../../src/gpu/store/instance-store.js";
import { StatisticsStore } from "../../src/gpu/store/statistics-store.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";

let db: TestDatabase;
const HOUR = 3_600_000;

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
});

afterAll(async () => {
  await db?.drop();
});

async function tables(): Promise<string[]> {
  const { rows } = await db.knex.raw<{ rows: Array<{ table_name: string }> }>(
    "select table_name from information_schema.tables where table_schema = 'public' and table_name not like 'knex_%' order by 1",
  );
  return rows.map((r) => r.table_name);
}

/** Rolls migrations back, newest first, until the named one is undone. */
async function undoThrough(name: string): Promise<void> {
  for (;;) {
    const [done] = (await db.knex.migrate.list()) as [Array<{ name: string } | string>, unknown];
    if (!done.some((m) => (typeof m === "string" ? m : m.name) === name)) return;
    await db.knex.migrate.down();
  }
}

describe("migrations", () => {
  it("apply on an empty database, hold data, roll back to nothing and apply again", async () => {
    await migrateToLatest(db.knex);
    expect(await tables()).toEqual(expect.arrayContaining(["GpuExecutionLog", "gpu_instances"]));

    await db.knex("gpu_instances").insert({ instance_id: "gpu-1", offer_id: "offer-1", status: "running", cost_per_hour: 0.4 });
    await db.knex("GpuExecutionLog").insert({ instance_id: "gpu-1", operation: "create_instance", success: true });
    expect(await db.knex("gpu_instances").count({ n: "*" }).first()).toEqual({ n: "1" });

    await db.knex.migrate.rollback(undefined, true);
    expect(await tables()).toEqual([]);

    await migrateToLatest(db.knex);
    expect(await db.knex("gpu_instances").count({ n: "*" }).first()).toEqual({ n: "0" });
  });

  it("ends the cost of failed records written before the money rules", async () => {
    await undoThrough("20261122000000_gpu_instance_money");
    const created = new Date(Date.now() - 10 * HOUR);
    const failedAt = new Date(Date.now() - 9 * HOUR);
    await db.knex("gpu_instances").insert([
      // Nothing was rented: it never cost anything.
      { instance_id: "gpu-10", offer_id: "o", status: "failed", cost_per_hour: 1, created_at: created, updated_at: failedAt },
      // A machine existed until the record failed.
      { instance_id: "gpu-11", offer_id: "o", market_instance_id: "m-11", status: "failed", cost_per_hour: 2, created_at: created, updated_at: failedAt },
      { instance_id: "gpu-12", offer_id: "o", status: "running", cost_per_hour: 0.5, created_at: created, updated_at: created },
    ]);
    const costBefore = (await StatisticsStore.create({ knex: db.knex }).statistics()).totalCost;
    expect(costBefore).toBeCloseTo(3.5 * 10, 2);

    await migrateToLatest(db.knex);

    const rows = await db.knex("gpu_instances").orderBy("instance_id");
    expect(rows.map((r) => [r.instance_id, r.destroyed_at?.getTime() ?? null])).toEqual([
      ["gpu-10", created.getTime()],
      ["gpu-11", failedAt.getTime()],
      ["gpu-12", null],
    ]);
    const stats = await StatisticsStore.create({ knex: db.knex }).statistics();
    expect(stats.totalCost).toBeCloseTo(2 * 1 + 0.5 * 10, 2);
    expect(stats.statusDistribution).toEqual({ failed: 2, running: 1 });
    await db.knex("gpu_instances").delete();
  });

  it("keeps records from before deployment-scoped labels matched by the bare instance_id their machines carry", async () => {
    await undoThrough("20261122000100_gpu_market_label");
    await db.knex("gpu_instances").insert({ instance_id: "gpu-20", offer_id: "o", market_instance_id: "m-20", status: "running" });
    await migrateToLatest(db.knex);
    const store = InstanceStore.create({ knex: db.knex });
    const [legacy] = await store.getByLabels(["gpu-20", "d0123456789ab/gpu-20"]);
    expect(legacy).toMatchObject({ instanceId: "gpu-20", marketLabel: "gpu-20", marketInstanceId: "m-20" });
    await db.knex("gpu_instances").delete();
  });

  it("gives execution log rows and index runs written before actors the actor unknown", async () => {
    await undoThrough("20261126000000_operation_actor");
    await db.knex("GpuExecutionLog").insert({ instance_id: "gpu-30", operation: "create_instance", success: true });
    const counts = { fetched_count: 1, indexed_count: 1, failed_count: 0, removed_count: 0 };
    await db.knex("goods_index_runs").insert({ mode: "full", success: true, started_at: new Date(), finished_at: new Date(), ...counts });
    await migrateToLatest(db.knex);
    expect(await db.knex("GpuExecutionLog").where({ instance_id: "gpu-30" }).select("actor")).toEqual([{ actor: "unknown" }]);
    expect(await db.knex("goods_index_runs").where({ mode: "full" }).select("actor")).toEqual([{ actor: "unknown" }]);
    await db.knex("GpuExecutionLog").delete();
    await db.knex("goods_index_runs").delete();
  });

  it("adds endpoints over existing instances, a name unique among live endpoints only, and rolls back keeping the instances", async () => {
    await undoThrough("20261126010000_gpu_endpoints");
    await db.knex("gpu_instances").insert({ instance_id: "gpu-30", offer_id: "o", status: "running" });
    await migrateToLatest(db.knex);
    expect((await InstanceStore.create({ knex: db.knex }).get("gpu-30"))?.endpoint).toBeNull();
    const endpoint = { name: "coder", template_name: "budget", replicas: 1, max_cost_per_hour: 1 };
    const [first] = await db.knex("gpu_endpoints").insert(endpoint).returning("id");
    await expect(db.knex("gpu_endpoints").insert(endpoint)).rejects.toThrow(/gpu_endpoints_live_name_idx/);
    await db.knex("gpu_endpoints").where({ id: first.id }).update({ phase: "deleted" });
    await db.knex("gpu_endpoints").insert(endpoint);
    await expect(db.knex("gpu_endpoints").insert({ ...endpoint, name: "x", replicas: 17 })).rejects.toThrow(/gpu_endpoints_replicas_check/);
    await undoThrough("20261126010000_gpu_endpoints");
    expect(await tables()).not.toContain("gpu_endpoints");
    expect(await db.knex("gpu_instances").where({ instance_id: "gpu-30" }).first()).toBeDefined();
    await migrateToLatest(db.knex);
    await db.knex("gpu_instances").delete();
  });

  it("splits the <market>:<id> ids written with several markets into the market and its own id", async () => {
    await undoThrough("20261129010000_gpu_instance_market_own_id");
    await db.knex("gpu_instances").insert([
      { instance_id: "gpu-40", offer_id: "o", status: "running", market: "vastai", market_instance_id: "vastai:4200001" },
      { instance_id: "gpu-41", offer_id: "o", status: "running", market: "runpod", market_instance_id: "runpod:abc123" },
      // With one market: already the own id.
      { instance_id: "gpu-42", offer_id: "o", status: "running", market: "vastai", market_instance_id: "4200002" },
      // From before the market column: named by its id's market.
      { instance_id: "gpu-43", offer_id: "o", status: "running", market: null, market_instance_id: "simulated:sim-7" },
      // A bare id, no market: left to the first start (docs/marketplaces.md).
      { instance_id: "gpu-44", offer_id: "o", status: "running", market: null, market_instance_id: "4200003" },
    ]);
    await migrateToLatest(db.knex);
    const rows = await db.knex("gpu_instances").orderBy("instance_id").select("instance_id", "market", "market_instance_id");
    expect(rows.map((r) => [r.instance_id, r.market, r.market_instance_id])).toEqual([
      ["gpu-40", "vastai", "4200001"],
      ["gpu-41", "runpod", "abc123"],
      ["gpu-42", "vastai", "4200002"],
      ["gpu-43", "simulated", "sim-7"],
      ["gpu-44", null, "4200003"],
    ]);
    await db.knex("gpu_instances").delete();
  });

  it("gives load rows written before callers were counted none in flight, and rolls back keeping them", async () => {
    await undoThrough("20261129050000_gpu_endpoint_load_callers");
    await db.knex("gpu_endpoint_load").insert({ process_id: "older", endpoint_id: 1, in_flight: 2 });
    await migrateToLatest(db.knex);
    expect(await db.knex("gpu_endpoint_load").where({ process_id: "older" }).first()).toMatchObject({ in_flight: 2, by_caller: {} });
    await undoThrough("20261129050000_gpu_endpoint_load_callers");
    expect(await db.knex("gpu_endpoint_load").where({ process_id: "older" }).first()).toMatchObject({ in_flight: 2 });
    await migrateToLatest(db.knex);
    await db.knex("gpu_endpoint_load").delete();
  });

  it("refuses a status value outside the contract", async () => {
    await expect(
      db.knex("gpu_instances").insert({ instance_id: "gpu-2", offer_id: "o", status: "sleeping" }),
    ).rejects.toThrow(/gpu_instances_status_check/);
  });
});

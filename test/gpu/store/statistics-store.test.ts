import type { Knex } from "knex";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InstanceStore } from "../../../src/gpu/store/instance-store.js";
import { StatisticsStore } from "../../../src/gpu/store/statistics-store.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { HOUR, seedInstances } from "../seed.js";

// The statistics read a summary that triggers maintain. Whatever writes happen (bulk inserts,
// status changes, destroys, deletes, concurrent updates), it must equal a full scan.

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

/** The statistics computed the slow way, straight from every record. */
async function fullScan(knex: Knex) {
  const { rows } = await knex.raw<{ rows: Array<{ status: string; gpu: string; n: string; cost: string; cph: string }> }>(`
    select status, gpu_info->>'gpu_name' as gpu, count(*) as n, sum(cost_per_hour) as cph,
           sum(cost_per_hour * extract(epoch from (coalesce(destroyed_at, now()) - created_at)) / 3600) as cost
    from gpu_instances group by 1, 2`);
  const sum = (key: "n" | "cost" | "cph") => rows.reduce((s, r) => s + Number(r[key]), 0);
  const by = (key: "status" | "gpu") =>
    rows.reduce<Record<string, number>>((acc, r) => ({ ...acc, [r[key]]: (acc[r[key]] ?? 0) + Number(r.n) }), {});
  return { total: sum("n"), cost: sum("cost"), average: sum("n") ? sum("cph") / sum("n") : 0, byStatus: by("status"), byGpu: by("gpu") };
}

async function expectSummaryEqualsFullScan() {
  // One transaction, so that both read the same now() (live instances' cost grows with it).
  const [stats, expected] = await db.knex.transaction(async (trx) => [await StatisticsStore.create({ knex: trx }).statistics(), await fullScan(trx)] as const);
  expect(stats.totalInstances).toBe(expected.total);
  expect(stats.statusDistribution).toEqual(expected.byStatus);
  expect(stats.gpuDistribution).toEqual(expected.byGpu);
  expect(stats.totalCost).toBeCloseTo(expected.cost, 3);
  expect(stats.averageCostPerHour).toBeCloseTo(expected.average, 9);
  const instances = InstanceStore.create({ knex: db.knex });
  expect(await instances.count()).toBe(expected.total);
  expect(await instances.count("running")).toBe(expected.byStatus.running ?? 0);
}

describe("the statistics summary", () => {
  it("is empty for an empty table", async () => {
    expect(await StatisticsStore.create({ knex: db.knex }).statistics()).toEqual({
      totalInstances: 0,
      activeInstances: 0,
      destroyedInstances: 0,
      totalCost: 0,
      averageCostPerHour: 0,
      gpuDistribution: {},
      statusDistribution: {},
    });
  });

  it("equals a full scan after bulk inserts, status changes, destroys and deletes", async () => {
    const now = Date.now();
    await seedInstances(
      db.knex,
      Array.from({ length: 300 }, (_, n) => ({
        id: `gpu-${n}`,
        status: ["running", "exited", "destroyed", "loading"][n % 4]!,
        gpuName: ["RTX 4090", "L4", "H100 SXM"][n % 3]!,
        costPerHour: 0.1 + (n % 17) * 0.13,
        createdAt: new Date(now - (n + 1) * HOUR),
        destroyedAt: n % 4 === 2 ? new Date(now - (n + 1) * HOUR + 1_234_567) : undefined,
      })),
    );
    await expectSummaryEqualsFullScan();

    const store = InstanceStore.create({ knex: db.knex });
    await store.changeStatus("gpu-0", "running", "exited");
    await store.markDestroyed("gpu-1");
    await db.knex("gpu_instances").where("instance_id", "gpu-3").update({ cost_per_hour: 9.5, gpu_info: JSON.stringify({ gpu_name: "A100 SXM4" }) });
    await db.knex("gpu_instances").whereIn("instance_id", ["gpu-4", "gpu-5"]).delete();
    await expectSummaryEqualsFullScan();
  });

  it("stays exact under concurrent status changes in both directions", async () => {
    const store = InstanceStore.create({ knex: db.knex });
    const running = await db.knex("gpu_instances").where({ status: "running" }).pluck("instance_id");
    const exited = await db.knex("gpu_instances").where({ status: "exited" }).pluck("instance_id");
    await Promise.all([
      ...running.map((id: string) => db.knex.transaction((trx) => store.changeStatus(id, "running", "exited", undefined, trx))),
      ...exited.map((id: string) => db.knex.transaction((trx) => store.changeStatus(id, "exited", "running", undefined, trx))),
    ]);
    await expectSummaryEqualsFullScan();
  });
});

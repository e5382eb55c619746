import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateToLatest } from "../../src/db/knex.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";

let db: TestDatabase;

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

  it("refuses a status value outside the contract", async () => {
    await expect(
      db.knex("gpu_instances").insert({ instance_id: "gpu-2", offer_id: "o", status: "sleeping" }),
    ).rejects.toThrow(/gpu_instances_status_check/);
  });
});

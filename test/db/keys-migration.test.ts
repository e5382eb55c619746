import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateToLatest } from "../../src/db/knex.js";
import { EndpointStore } from "../../src/gpu/endpoints/resource/endpoint-store.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";

// The keys migration as an upgrade: endpoints written before it keep their rows and are unpriced;
// the keys and usage tables take their rows with their rules; rolled back, the endpoints stay.

const MIGRATION = "20261129020000_gpu_keys";

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ migrate: false });
  await migrateToLatest(db.knex);
});

afterAll(async () => {
  await db?.drop();
});

async function undoThrough(name: string): Promise<void> {
  for (;;) {
    const [done] = (await db.knex.migrate.list()) as [Array<{ name: string } | string>, unknown];
    if (!done.some((m) => (typeof m === "string" ? m : m.name) === name)) return;
    await db.knex.migrate.down();
  }
}

describe("the keys migration", () => {
  it("keeps the endpoints written before it, unpriced, and adds keys and their usage minutes", async () => {
    await undoThrough(MIGRATION);
    await db.knex("gpu_endpoints").insert({ name: "older", template_name: "budget", replicas: 1, max_cost_per_hour: 2 });
    await migrateToLatest(db.knex);

    const older = await EndpointStore.create({ knex: db.knex }).getByName("older");
    expect(older).toMatchObject({ name: "older", replicas: 1, maxCostPerHour: 2, tokenPrice: null });
    await expect(db.knex("gpu_endpoints").where({ name: "older" }).update({ token_input_per_mtok: 1 })).rejects.toThrow(/gpu_endpoints_token_price/);
    await db.knex("gpu_endpoints").where({ name: "older" }).update({ token_input_per_mtok: 0.5, token_output_per_mtok: 1 });

    const key = { name: "k", secret_sha256: Buffer.alloc(32, 1), key_prefix: "sk-abcde" };
    await db.knex("gpu_keys").insert(key);
    await expect(db.knex("gpu_keys").insert({ ...key, secret_sha256: Buffer.alloc(32, 2) })).rejects.toThrow(/gpu_keys_live_name/);
    await expect(db.knex("gpu_keys").insert({ ...key, name: "d", secret_sha256: Buffer.alloc(32, 3), budget_duration: "2d" })).rejects.toThrow(/gpu_keys_budget_duration/);
    const minute = { key_name: "k", endpoint_name: "older", minute: new Date("2026-11-29T00:00:00Z"), requests: 1 };
    await db.knex("gpu_key_usage_minutes").insert(minute);
    await expect(db.knex("gpu_key_usage_minutes").insert(minute)).rejects.toThrow(/pkey/);
    expect(await db.knex("gpu_key_usage_minutes").first()).toMatchObject({ refused: {}, spend_micros: "0", estimated: 0 });

    await undoThrough(MIGRATION);
    expect(await db.knex("gpu_endpoints").where({ name: "older" }).first()).toMatchObject({ max_cost_per_hour: 2 });
    await migrateToLatest(db.knex);
  });
});

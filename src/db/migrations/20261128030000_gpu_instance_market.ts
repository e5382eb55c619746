import type { Knex } from "knex";

// The market (MARKETPLACE's name: vastai, simulated, ...) each instance is rented on, now that
// several can be configured at once. Null for records from before: they belong to the first
// market MARKETPLACE names. GET /api/gpu/markets groups the live records by it.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.text("market");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("market");
  });
}

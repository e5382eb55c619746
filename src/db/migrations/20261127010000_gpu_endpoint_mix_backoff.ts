import type { Knex } from "knex";

// The launches that move an endpoint's mix of machines (a fallback's way back to a bid, a PATCH
// of its capacity) back off on their own (SPEC.md section 2, "Back from fallback"): their
// failures never delay the launch that replaces a missing replica, and never hold a
// full-strength endpoint back.
// - mix_failures: such launches that did not go through in a row;
// - next_mix_at: none before this instant; null: now.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.integer("mix_failures").notNullable().defaultTo(0);
    t.timestamp("next_mix_at", { useTz: true }).nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.dropColumn("mix_failures");
    t.dropColumn("next_mix_at");
  });
}

import type { Knex } from "knex";

// The markets an endpoint's replicas may be rented on (SPEC.md section 2, "Several marketplaces",
// Endpoints): capacity.markets, MARKETPLACE's names; empty (and for endpoints from before): every
// configured market; capacity.spread_markets, whether its replicas are spread over markets whose
// prices are close (default false).

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.specificType("capacity_markets", "text[]").notNullable().defaultTo("{}");
    t.boolean("capacity_spread_markets").notNullable().defaultTo(false);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.dropColumn("capacity_spread_markets");
    t.dropColumn("capacity_markets");
  });
}

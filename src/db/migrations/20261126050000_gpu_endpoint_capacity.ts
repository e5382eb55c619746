import type { Knex } from "knex";

// Interruptible replicas with on-demand fallback (SPEC.md section 2): an endpoint's capacity
// settings, and what kind of machine each replica was rented as.
// - gpu_endpoints.capacity_*: never null; the defaults (every replica on-demand) are what an
//   endpoint created before them, or without them, has. The checks repeat the API's bounds so
//   that no writer can store settings the API would refuse.
// - gpu_endpoint_replicas.interruptible: the replica was rented as an interruptible bid.
// - gpu_endpoint_replicas.fallback: an on-demand replica rented in an interruptible slot because
//   no bid fitted (so it is never interruptible itself), which a bid later takes back.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.boolean("capacity_interruptible").notNullable().defaultTo(false);
    t.integer("capacity_on_demand_base").notNullable().defaultTo(0);
    t.boolean("capacity_fallback").notNullable().defaultTo(true);
    t.double("capacity_bid_margin").notNullable().defaultTo(0.25);
  });
  await knex.raw(`alter table gpu_endpoints add constraint gpu_endpoints_capacity_check check (
    capacity_on_demand_base between 0 and 16
    and capacity_bid_margin between 0 and 1)`);
  await knex.schema.alterTable("gpu_endpoint_replicas", (t) => {
    t.boolean("interruptible").notNullable().defaultTo(false);
    t.boolean("fallback").notNullable().defaultTo(false);
  });
  await knex.raw("alter table gpu_endpoint_replicas add constraint gpu_endpoint_replicas_kind_check check (not (interruptible and fallback))");
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw("alter table gpu_endpoint_replicas drop constraint gpu_endpoint_replicas_kind_check");
  await knex.schema.alterTable("gpu_endpoint_replicas", (t) => {
    t.dropColumn("interruptible");
    t.dropColumn("fallback");
  });
  await knex.raw("alter table gpu_endpoints drop constraint gpu_endpoints_capacity_check");
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    for (const column of ["capacity_interruptible", "capacity_on_demand_base", "capacity_fallback", "capacity_bid_margin"]) t.dropColumn(column);
  });
}

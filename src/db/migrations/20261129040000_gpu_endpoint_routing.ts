import type { Knex } from "knex";

// How an endpoint's requests choose among its ready replicas (SPEC.md section 2, "Requests that
// share a prompt go where it is cached"): `prefix` (the default, endpoints from before included) or
// `least_outstanding`.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.text("routing").notNullable().defaultTo("prefix");
  });
  await knex.raw("alter table gpu_endpoints add constraint gpu_endpoints_routing_check check (routing in ('prefix', 'least_outstanding'))");
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.dropColumn("routing");
  });
}

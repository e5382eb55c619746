import type { Knex } from "knex";

// Each caller's answers in flight, published with the endpoint proxy's load (SPEC.md section 2,
// "Keys for callers", in_flight): by_caller maps a key's or static token's name to its answers in
// flight (held ones included) for the row's endpoint in the row's process; callers with none are
// left out. Rows written before it, or by a process that does not write it yet, count none.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoint_load", (t) => {
    t.jsonb("by_caller").notNullable().defaultTo("{}");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoint_load", (t) => {
    t.dropColumn("by_caller");
  });
}

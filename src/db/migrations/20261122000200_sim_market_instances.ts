import type { Knex } from "knex";

// The simulated marketplace's instances live in the service's database (SPEC.md section 2,
// "Marketplace"), so that a restarted process resumes them, and processes sharing the database
// share one marketplace. An offer is rented at most once: the unique offer_id says so to every
// process at once.

export async function up(knex: Knex): Promise<void> {
  await knex.raw("create sequence sim_market_instance_id_seq start 9100001");
  await knex.schema.createTable("sim_market_instances", (t) => {
    t.text("id").primary();
    t.text("offer_id").notNullable().unique();
    t.jsonb("request").notNullable();
    t.bigInteger("created_ms").notNullable();
    t.bigInteger("running_ms").notNullable();
    t.text("halted");
    t.boolean("server_wanted").notNullable();
    t.integer("host_port");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("sim_market_instances");
  await knex.raw("drop sequence sim_market_instance_id_seq");
}

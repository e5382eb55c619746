import type { Knex } from "knex";

// The physical machine an instance was rented on (vast.ai's machine_id; the simulated market's
// offer), so that an endpoint spreads its replicas over machines: one outbid machine must not take
// several replicas at once. Null where the marketplace does not say.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.text("machine_id");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("machine_id");
  });
}

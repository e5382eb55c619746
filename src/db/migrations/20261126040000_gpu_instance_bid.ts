import type { Knex } from "knex";

// Interruptible instances (SPEC.md section 2, "Interruptible replicas with on-demand fallback"):
// a record says whether its machine is an interruptible bid and at what bid ($/h for the machine,
// storage excluded; cost_per_hour stays what is billed: the bid plus storage), and when the
// marketplace preempted it. The stored status values are a contract, so a preempted instance is
// stored `exited` with preempted_at set; it is cleared if the machine runs again.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.boolean("interruptible").notNullable().defaultTo(false);
    t.double("bid_per_hour");
    t.timestamp("preempted_at", { useTz: true });
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("interruptible");
    t.dropColumn("bid_per_hour");
    t.dropColumn("preempted_at");
  });
}

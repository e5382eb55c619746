import type { Knex } from "knex";

// The simulated marketplace's interruptible instances (SPEC.md section 2, "Interruptible replicas
// with on-demand fallback"): when a bid instance will be preempted, drawn once at its creation so
// that a restarted process preempts it at the same moment. Which instances are bids is in the
// stored request (its bidPerHour); a preempted one is halted 'preempted'.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("sim_market_instances", (t) => {
    t.bigInteger("preempt_ms");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("sim_market_instances", (t) => {
    t.dropColumn("preempt_ms");
  });
}

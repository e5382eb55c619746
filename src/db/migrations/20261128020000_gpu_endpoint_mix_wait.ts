import type { Knex } from "knex";

// The way back from a fallback (SPEC.md section 2, "Back from fallback"): "no bid costs less than
// the fallback" is a wait, not a failure: one event when it starts, a look again at most a minute
// later, no backoff. And a bid launched to take a replica's place that ends before it is ready
// counts against the moves' backoff, not the launches'.
// - gpu_endpoints.mix_wait_since: since when the moves of the mix wait for a cheaper bid; null: not waiting;
// - gpu_endpoint_replicas.replaces: the instance_id of the replica this one was launched to take
//   the place of (a move of the mix); null: an ordinary launch.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.timestamp("mix_wait_since", { useTz: true }).nullable();
  });
  await knex.schema.alterTable("gpu_endpoint_replicas", (t) => {
    t.text("replaces").nullable();
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoint_replicas", (t) => {
    t.dropColumn("replaces");
  });
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.dropColumn("mix_wait_since");
  });
}

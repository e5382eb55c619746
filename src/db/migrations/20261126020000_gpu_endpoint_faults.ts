import type { Knex } from "knex";

// Endpoints under faults (SPEC.md section 2, "Control loops survive their database"):
// - gpu_endpoint_replicas.record_claimed_at: set, in the transaction that writes the replica's
//   instance record, only while the row is not removed. A leader removes a row whose record never
//   came only while this is unset, so a row the new leader removed can never be rented by an old
//   one: whichever writes the row first wins, and the other sees it.
// - gpu_endpoint_replicas.destroying_at, destroy_event, destroy_detail: the controller's decision
//   to destroy a replica, written before the destroy, with the event that tells it. A destroy the
//   marketplace confirms later (the sync loop retries it) is then finished with that event, not
//   read as a machine lost outside the endpoint.
// - gpu_instances.price_cap: the most this creation may rent at ($/h, the template's max_price or
//   an endpoint's budget left); an adopted creation is checked against it too.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoint_replicas", (t) => {
    t.timestamp("record_claimed_at", { useTz: true });
    t.timestamp("destroying_at", { useTz: true });
    t.text("destroy_event");
    t.text("destroy_detail");
  });
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.double("price_cap");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("price_cap");
  });
  await knex.schema.alterTable("gpu_endpoint_replicas", (t) => {
    t.dropColumn("destroy_detail");
    t.dropColumn("destroy_event");
    t.dropColumn("destroying_at");
    t.dropColumn("record_claimed_at");
  });
}

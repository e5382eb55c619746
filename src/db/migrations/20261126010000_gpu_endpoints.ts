import type { Knex } from "knex";

// Endpoints (SPEC.md section 2, "Endpoints"): the resource, its replicas and its events.
// - gpu_endpoints: one row per endpoint ever created; a name is unique among endpoints not
//   deleted (partial unique index), so a deleted name can be reused. `phase` is the stored part
//   of the state (active, deleting, deleted); the rest (starting, ready, ...) is computed.
// - gpu_endpoint_replicas: the controller's intent and observations per replica. A row is written
//   before its instance record, so a crash mid-launch leaves a row the next leader finds (no
//   duplicate), and the instance record's label lets the reconciler adopt the machine (no
//   orphan). Rows are kept once removed (removed_at) so the endpoint's total cost counts them.
// - gpu_endpoint_events: what happened, newest first by id, with the actor that caused it.
// - gpu_instances.endpoint: the endpoint a replica's record belongs to.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable("gpu_endpoints", (t) => {
    t.bigIncrements("id");
    t.text("name").notNullable();
    t.text("template_name").notNullable();
    t.integer("replicas").notNullable();
    t.double("max_cost_per_hour").notNullable();
    t.jsonb("custom_config").notNullable().defaultTo("{}");
    t.text("phase").notNullable().defaultTo("active");
    t.boolean("ever_ready").notNullable().defaultTo(false);
    t.boolean("budget_held").notNullable().defaultTo(false);
    t.integer("launch_failures").notNullable().defaultTo(0);
    t.timestamp("next_launch_at", { useTz: true });
    t.timestamp("created_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("updated_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("deleted_at", { useTz: true });
  });
  await knex.raw("alter table gpu_endpoints add constraint gpu_endpoints_phase_check check (phase in ('active', 'deleting', 'deleted'))");
  await knex.raw("alter table gpu_endpoints add constraint gpu_endpoints_replicas_check check (replicas between 0 and 16)");
  await knex.raw("alter table gpu_endpoints add constraint gpu_endpoints_budget_check check (max_cost_per_hour > 0)");
  await knex.raw("create unique index gpu_endpoints_live_name_idx on gpu_endpoints (name) where phase <> 'deleted'");

  await knex.schema.createTable("gpu_endpoint_replicas", (t) => {
    t.text("instance_id").primary();
    t.bigInteger("endpoint_id").notNullable().references("id").inTable("gpu_endpoints");
    t.boolean("draining").notNullable().defaultTo(false);
    t.integer("successes").notNullable().defaultTo(0);
    t.integer("failed_probes").notNullable().defaultTo(0);
    t.timestamp("ready_since", { useTz: true });
    t.timestamp("failing_since", { useTz: true });
    t.timestamp("draining_since", { useTz: true });
    // Set once the replica is judged for replacement (unhealthy, or never ready in time).
    t.timestamp("condemned_at", { useTz: true });
    t.timestamp("created_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("removed_at", { useTz: true });
  });
  await knex.raw("create index gpu_endpoint_replicas_live_idx on gpu_endpoint_replicas (endpoint_id) where removed_at is null");

  await knex.schema.createTable("gpu_endpoint_events", (t) => {
    t.bigIncrements("id");
    t.bigInteger("endpoint_id").notNullable().references("id").inTable("gpu_endpoints");
    t.timestamp("at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.text("kind").notNullable();
    t.text("instance_id");
    t.text("detail").notNullable();
    t.text("actor").notNullable();
  });
  await knex.raw("create index gpu_endpoint_events_endpoint_idx on gpu_endpoint_events (endpoint_id, id desc)");

  await knex.schema.alterTable("gpu_instances", (t) => {
    t.text("endpoint");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("endpoint");
  });
  await knex.schema.dropTable("gpu_endpoint_events");
  await knex.schema.dropTable("gpu_endpoint_replicas");
  await knex.schema.dropTable("gpu_endpoints");
}

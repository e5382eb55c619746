import type { Knex } from "knex";

// Stored instance records (seed 000 section 2.4) and the execution log of every instance
// operation. Status values are checked by the database so that no writer can store another.
const STATUSES = ["creating", "loading", "running", "running_llm", "exited", "failed", "destroyed"];

export async function up(knex: Knex): Promise<void> {
  // instance_id is "gpu-" and a number from this sequence, so ids never repeat, even after a
  // failed creation or a rolled-back transaction.
  await knex.raw("create sequence gpu_instance_id_seq start with 1001");
  await knex.schema.createTable("gpu_instances", (t) => {
    t.text("instance_id").primary();
    // The marketplace instance carries instance_id as its label, and the record is written
    // before the marketplace call: a crash between the call and the update that fills
    // market_instance_id is repaired by matching labels (src/gpu/reconciler.ts).
    t.text("market_instance_id");
    t.text("offer_id").notNullable();
    t.text("image_name").notNullable().defaultTo("");
    t.text("status").notNullable().checkIn(STATUSES, "gpu_instances_status_check");
    t.jsonb("gpu_info").notNullable().defaultTo("{}");
    // Kept beside gpu_info so that statistics group by a plain column.
    t.specificType("gpu_name", "text generated always as (gpu_info->>'gpu_name') stored");
    t.double("cost_per_hour").notNullable().defaultTo(0);
    t.text("public_ip");
    t.integer("ssh_port");
    t.jsonb("port_mappings").notNullable().defaultTo("{}");
    t.text("template_name");
    t.timestamp("created_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("updated_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("destroyed_at", { useTz: true });
    // Set when a destroy was asked for and not yet confirmed; the sync loop retries it.
    t.timestamp("destroy_requested_at", { useTz: true });
    t.text("start_command").notNullable().defaultTo("");
    t.boolean("auto_destroy").notNullable().defaultTo(false);
  });
  // The list pages by (sort key, instance_id), newest or dearest first, optionally per status.
  await knex.raw("create index gpu_instances_created_idx on gpu_instances (created_at desc, instance_id desc)");
  await knex.raw("create index gpu_instances_status_created_idx on gpu_instances (status, created_at desc, instance_id desc)");
  await knex.raw("create index gpu_instances_cost_idx on gpu_instances (cost_per_hour desc, instance_id desc)");
  // The sync loop and the reconciler read only instances that are not finished.
  await knex.raw(
    "create index gpu_instances_live_idx on gpu_instances (instance_id) where status not in ('destroyed', 'failed') or (destroy_requested_at is not null and status <> 'destroyed')",
  );
  await knex.schema.createTable("GpuExecutionLog", (t) => {
    t.bigIncrements("id").primary();
    t.text("instance_id");
    t.text("operation").notNullable();
    t.text("command").notNullable().defaultTo("");
    t.text("result").notNullable().defaultTo("");
    t.integer("execution_time").notNullable().defaultTo(0);
    t.boolean("success").notNullable();
    t.jsonb("metadata").notNullable().defaultTo("{}");
    t.timestamp("created_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.raw('create index gpu_execution_log_instance_idx on "GpuExecutionLog" (instance_id, id desc)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("GpuExecutionLog");
  await knex.schema.dropTable("gpu_instances");
  await knex.raw("drop sequence gpu_instance_id_seq");
}

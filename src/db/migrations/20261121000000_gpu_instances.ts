import type { Knex } from "knex";

// Stored instance records (seed 000 section 2.4) and the execution log of every instance
// operation. Status values are checked by the database so that no writer can store another.
const STATUSES = ["creating", "loading", "running", "running_llm", "exited", "failed", "destroyed"];

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable("gpu_instances", (t) => {
    t.text("instance_id").primary();
    t.text("offer_id").notNullable();
    t.text("image_name").notNullable().defaultTo("");
    t.text("status").notNullable().checkIn(STATUSES, "gpu_instances_status_check");
    t.jsonb("gpu_info").notNullable().defaultTo("{}");
    t.double("cost_per_hour").notNullable().defaultTo(0);
    t.text("public_ip");
    t.integer("ssh_port");
    t.jsonb("port_mappings").notNullable().defaultTo("{}");
    t.text("template_name");
    t.timestamp("created_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("updated_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("destroyed_at", { useTz: true });
    t.text("start_command").notNullable().defaultTo("");
    t.boolean("auto_destroy").notNullable().defaultTo(false);
    t.index(["status"], "gpu_instances_status_idx");
    t.index(["created_at", "instance_id"], "gpu_instances_created_at_idx");
  });
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
    t.index(["instance_id", "created_at"], "gpu_execution_log_instance_idx");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("GpuExecutionLog");
  await knex.schema.dropTable("gpu_instances");
}

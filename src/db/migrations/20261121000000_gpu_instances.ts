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
    // market_instance_id is repaired by matching labels (src/gpu/lifecycle/reconciler.ts).
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
  await createStatsSummary(knex);
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
  await knex.raw("drop function gpu_instance_stats_apply()");
  await knex.schema.dropTable("gpu_instance_stats");
  await knex.raw("drop sequence gpu_instance_id_seq");
}

// Statistics and list counts read a summary per (status, gpu_name) that triggers keep equal to
// the records, instead of scanning every record per request. Cost stays exact however long
// instances live, because it is linear in time:
//   total_cost = (sum c*destroyed_at + now * sum c [live] - sum c*created_at) / 3600 (epoch seconds).
// Statement-level triggers apply one aggregated delta per statement (a bulk insert is one
// upsert per group), and rows are upserted in key order so that concurrent writers lock the
// summary rows in the same order and cannot deadlock.
async function createStatsSummary(knex: Knex): Promise<void> {
  await knex.raw(`
    create table gpu_instance_stats (
      status text not null,
      gpu_name text not null,
      n bigint not null default 0,
      sum_cost numeric not null default 0,
      live_cost numeric not null default 0,
      cost_created numeric not null default 0,
      cost_destroyed numeric not null default 0,
      primary key (status, gpu_name)
    )`);
  const delta = (sign: string, table: string) => `
    select status, coalesce(gpu_name, '') as gpu_name, ${sign} as n,
           ${sign} * cost_per_hour::numeric as sum_cost,
           case when destroyed_at is null then ${sign} * cost_per_hour::numeric else 0 end as live_cost,
           ${sign} * cost_per_hour::numeric * extract(epoch from created_at) as cost_created,
           coalesce(${sign} * cost_per_hour::numeric * extract(epoch from destroyed_at), 0) as cost_destroyed
    from ${table}`;
  const upsert = (rows: string) => `
    insert into gpu_instance_stats as s (status, gpu_name, n, sum_cost, live_cost, cost_created, cost_destroyed)
    select status, gpu_name, sum(n), sum(sum_cost), sum(live_cost), sum(cost_created), sum(cost_destroyed)
    from (${rows}) d
    group by status, gpu_name
    order by status, gpu_name
    on conflict (status, gpu_name) do update set
      n = s.n + excluded.n,
      sum_cost = s.sum_cost + excluded.sum_cost,
      live_cost = s.live_cost + excluded.live_cost,
      cost_created = s.cost_created + excluded.cost_created,
      cost_destroyed = s.cost_destroyed + excluded.cost_destroyed;`;
  await knex.raw(`
    create function gpu_instance_stats_apply() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' then
        ${upsert(delta("1", "new_rows"))}
      elsif tg_op = 'DELETE' then
        ${upsert(delta("-1", "old_rows"))}
      else
        ${upsert(`${delta("1", "new_rows")} union all ${delta("-1", "old_rows")}`)}
      end if;
      return null;
    end $$`);
  for (const [event, tables] of [
    ["insert", "new table as new_rows"],
    ["update", "new table as new_rows old table as old_rows"],
    ["delete", "old table as old_rows"],
  ] as const) {
    await knex.raw(`
      create trigger gpu_instance_stats_${event} after ${event} on gpu_instances
      referencing ${tables} for each statement execute function gpu_instance_stats_apply()`);
  }
}

import type { Knex } from "knex";

// An endpoint's history (SPEC.md section 5, "History"), in two tables:
// - gpu_endpoint_traffic: what each service process's proxy answered, per endpoint name and
//   minute, upserted with absolute counts (a repeated write changes nothing) about every second
//   while it has traffic. Requests by outcome and the first byte's latency as histogram bucket
//   counts, so that percentiles can be merged across processes. Kept minutes, not days: the
//   sampler reads it and pruning takes it away.
// - gpu_endpoint_history: one sample a minute per endpoint, written by the sync leader: the
//   minute's traffic summed over every process, with the load and the replicas as the sampler
//   saw them at the minute's end. `at` is the minute's end. Pruned after HISTORY_DAYS.
// first_byte holds one count per bucket of FIRST_BYTE_BOUNDS_MS (src/module.ts) and one more
// for slower answers; null when the minute had no first byte. Those bounds are this format:
// changing them needs a new column.
// No foreign key: rows are measurements, and pruning takes them away.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable("gpu_endpoint_traffic", (t) => {
    t.text("process_id").notNullable();
    t.text("endpoint_name").notNullable();
    t.timestamp("minute", { useTz: true }).notNullable();
    outcomes(t);
    t.timestamp("updated_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(["process_id", "endpoint_name", "minute"]);
    t.index(["minute"]);
  });
  await knex.schema.createTable("gpu_endpoint_history", (t) => {
    t.bigInteger("endpoint_id").notNullable();
    t.timestamp("at", { useTz: true }).notNullable();
    t.integer("load").notNullable();
    t.integer("held").notNullable();
    t.smallint("ready_replicas").notNullable();
    t.smallint("target_replicas").notNullable();
    outcomes(t);
    t.double("cost_per_hour").notNullable();
    t.primary(["endpoint_id", "at"]);
  });
}

/** Requests by outcome and the first byte's histogram, as both tables count them. */
function outcomes(t: Knex.CreateTableBuilder): void {
  for (const column of ["ok", "client_error", "server_error", "held_requests", "continued", "cut"]) t.integer(column).notNullable().defaultTo(0);
  t.specificType("first_byte", "integer[]");
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("gpu_endpoint_history");
  await knex.schema.dropTable("gpu_endpoint_traffic");
}

import type { Knex } from "knex";

// The endpoint proxy's load, as every service process publishes it (SPEC.md section 2, "Endpoints
// that follow their load"): one row per (process, endpoint), upserted about every second while
// the process has or just had requests for the endpoint, summed by the controller on the sync
// leader. A process's id is random per start, so a killed process's rows stop being updated and
// are ignored once stale; they are pruned later (last_request_at outlives the counts, for scale
// to zero). No foreign key: a row is a measurement, and pruning takes it away.
// - in_flight: requests sent to a replica whose answer has not ended; held: requests waiting for a
//   ready replica; by_replica: in_flight by instance id (scale-in picks the least busy).
// - last_request_at: when the last request for the endpoint arrived at that process.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable("gpu_endpoint_load", (t) => {
    t.text("process_id").notNullable();
    t.bigInteger("endpoint_id").notNullable();
    t.integer("in_flight").notNullable().defaultTo(0);
    t.integer("held").notNullable().defaultTo(0);
    t.jsonb("by_replica").notNullable().defaultTo("{}");
    t.timestamp("last_request_at", { useTz: true });
    t.timestamp("updated_at", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(["process_id", "endpoint_id"]);
    t.index(["endpoint_id", "updated_at"]);
    t.index(["updated_at"]);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable("gpu_endpoint_load");
}

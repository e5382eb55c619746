import type { Knex } from "knex";

// Money rules (SPEC.md section 2, "Money"):
// - per-instance limits max_hours and max_cost, after which the sync loop destroys the instance;
// - a failed record's cost ends when it failed. Records failed before this rule have no end and
//   kept accruing cost: those that never got a marketplace instance cost nothing (their end is
//   created_at), the others end when they were last updated, which is when they failed.
// The statistics summary follows through its triggers.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.double("max_hours");
    t.double("max_cost");
  });
  await knex.raw("alter table gpu_instances add constraint gpu_instances_max_hours_check check (max_hours > 0)");
  await knex.raw("alter table gpu_instances add constraint gpu_instances_max_cost_check check (max_cost > 0)");
  await knex.raw(`
    update gpu_instances
    set destroyed_at = case when market_instance_id is null then created_at else updated_at end
    where status = 'failed' and destroyed_at is null`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("max_hours");
    t.dropColumn("max_cost");
  });
  await knex.raw("update gpu_instances set destroyed_at = null where status = 'failed'");
}

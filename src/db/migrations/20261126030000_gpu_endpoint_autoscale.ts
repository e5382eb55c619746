import type { Knex } from "knex";

// Endpoints that follow their load (SPEC.md section 2, "autoscaling and scale to zero"): the
// autoscaler's settings, one column each, all null for a fixed count. `replicas` stays the
// target the controller keeps; with autoscaling the autoscaler moves it. The checks repeat the
// API's bounds so that no writer can store settings the API would refuse.

const COLUMNS = [
  "autoscale_min_replicas",
  "autoscale_max_replicas",
  "autoscale_target_in_flight",
  "autoscale_scale_up_after_s",
  "autoscale_scale_down_after_s",
] as const;

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    for (const column of COLUMNS) t.integer(column);
  });
  const allOrNone = `(${COLUMNS.map((c) => `${c} is null`).join(" and ")}) or (${COLUMNS.map((c) => `${c} is not null`).join(" and ")})`;
  await knex.raw(`alter table gpu_endpoints add constraint gpu_endpoints_autoscale_all_or_none check (${allOrNone})`);
  await knex.raw(`alter table gpu_endpoints add constraint gpu_endpoints_autoscale_check check (
    autoscale_min_replicas between 0 and 16
    and autoscale_max_replicas between 1 and 16
    and autoscale_max_replicas >= autoscale_min_replicas
    and autoscale_target_in_flight between 1 and 1000
    and autoscale_scale_up_after_s between 0 and 3600
    and autoscale_scale_down_after_s between 30 and 86400)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw("alter table gpu_endpoints drop constraint gpu_endpoints_autoscale_check");
  await knex.raw("alter table gpu_endpoints drop constraint gpu_endpoints_autoscale_all_or_none");
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    for (const column of COLUMNS) t.dropColumn(column);
  });
}

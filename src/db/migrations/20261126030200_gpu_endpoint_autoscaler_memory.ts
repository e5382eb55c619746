import type { Knex } from "knex";

// What the autoscaler remembers of an endpoint's load between rounds (src/gpu/endpoints/control/
// autoscaler.ts): since when its wanted count has stood above (up) or below (down) its target, and
// the least (up) or most (down) wanted since then. Kept in the database, so a new leader goes on
// counting where the old one was, and a restart neither rushes nor forgets a scale.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.text("scale_direction");
    t.timestamp("scale_since", { useTz: true });
    t.integer("scale_bound");
  });
  await knex.raw("alter table gpu_endpoints add constraint gpu_endpoints_scale_direction_check check (scale_direction in ('up', 'down'))");
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_endpoints", (t) => {
    t.dropColumn("scale_bound");
    t.dropColumn("scale_since");
    t.dropColumn("scale_direction");
  });
}

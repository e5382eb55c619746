import type { Knex } from "knex";

// Deployment-scoped labels (SPEC.md section 2, "Labels"): each record keeps the label its
// marketplace instance carries. Records created before have none (null): their machines were
// labelled with the bare instance_id, which is what null stands for, so they keep being synced
// and reconciled. The index serves the reconciler's lookup of records by label.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.text("market_label");
  });
  await knex.raw("create index gpu_instances_market_label_idx on gpu_instances ((coalesce(market_label, instance_id)))");
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("market_label");
  });
}

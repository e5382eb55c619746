import type { Knex } from "knex";

// Model-server keys (SPEC.md section 4): every model-serving instance created from now on starts
// its server with a key of its own, stored with its record. Records created before have none
// (null): their servers run without a key, and the service probes them as before.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.text("model_api_key");
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable("gpu_instances", (t) => {
    t.dropColumn("model_api_key");
  });
}

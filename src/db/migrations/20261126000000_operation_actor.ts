import type { Knex } from "knex";

// Who acted (SPEC.md section 4): every execution log row and every recorded index run names its
// actor. Rows written before have none: the default fills them with 'unknown'. The service's own
// writes always name an actor (their types require it); the default stays for rows written by
// hand or by older code during a rolling upgrade, which are 'unknown' too.

const TABLES = ["GpuExecutionLog", "goods_index_runs"];

export async function up(knex: Knex): Promise<void> {
  for (const table of TABLES) {
    await knex.schema.alterTable(table, (t) => {
      t.text("actor").notNullable().defaultTo("unknown");
    });
  }
}

export async function down(knex: Knex): Promise<void> {
  for (const table of TABLES) {
    await knex.schema.alterTable(table, (t) => {
      t.dropColumn("actor");
    });
  }
}

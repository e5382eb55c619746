import type { Knex } from "knex";

// The fleet's spend (SPEC.md section 5, "History") reads only the records that bill in its
// window: those that ended after the window's start, and those still live (destroyed_at null,
// which a btree index holds too). Without this index every record ever was read.

export async function up(knex: Knex): Promise<void> {
  await knex.raw("create index gpu_instances_destroyed_at_idx on gpu_instances (destroyed_at)");
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw("drop index gpu_instances_destroyed_at_idx");
}

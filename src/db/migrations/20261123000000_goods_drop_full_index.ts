import type { Knex } from "knex";

// pr_goods_full_idx (GOODS_NO where USE_YN='Y') served only the embedded keyset pages of full
// mode, which the primary key serves as well (nine rows in ten pass the filter). Every cursor
// finalize flip is an update that cannot be HOT (INDEX_YN is in partial index predicates), so
// each flipped row paid one insert into this index too: dropping it makes the flips about a
// quarter cheaper, and the batch's full load builds one index fewer.

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`drop index if exists pr_goods_full_idx`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`create index pr_goods_full_idx on "PR_GOODS_SEARCH_INTF" ("GOODS_NO") where "USE_YN" = 'Y'`);
}

import type { Knex } from "knex";

// The goods interface table that indexing reads (SPEC.md section 3). Names are the upper-case
// names of the contract, quoted, so SQL elsewhere writes "PR_GOODS_SEARCH_INTF"."GOODS_NO".
// Timestamps keep millisecond precision so that a value read into JavaScript compares equal to
// the stored one: cursor finalize is a compare-and-set on (GOODS_NO, SYS_MOD_DTM).
const TABLE = "PR_GOODS_SEARCH_INTF";

// Keys that a cursor run read and Elasticsearch accepted, written as bulk responses arrive so
// that they never pile up in process memory. Unlogged: it is scratch space, rebuilt by every run.
const ACCEPTED = "goods_index_accepted";

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable(TABLE, (t) => {
    t.string("GOODS_NO", 20).primary();
    t.text("GOODS_NM").notNullable();
    t.text("BRAND_NM");
    t.string("CATE_CD", 20);
    t.text("CATE_PATH");
    t.integer("SALE_PRICE").notNullable().defaultTo(0);
    t.integer("PROMO_PRICE");
    t.text("ICON_INFO");
    t.text("IMG_URL");
    t.string("USE_YN", 1).notNullable().defaultTo("Y").checkIn(["Y", "N"], "pr_goods_use_yn_check");
    t.string("INDEX_YN", 1).notNullable().defaultTo("N").checkIn(["Y", "N"], "pr_goods_index_yn_check");
    t.timestamp("SYS_REG_DTM", { useTz: true, precision: 3 }).notNullable().defaultTo(knex.raw("now()"));
    t.timestamp("SYS_MOD_DTM", { useTz: true, precision: 3 }).notNullable().defaultTo(knex.raw("now()"));
  });
  // One index per selection of the indexing modes: full (USE_YN='Y'), cursor (USE_YN='Y' and
  // INDEX_YN='N', kept small by being partial) and incremental (SYS_MOD_DTM window of USE_YN='Y').
  await knex.raw(`create index pr_goods_full_idx on "${TABLE}" ("GOODS_NO") where "USE_YN" = 'Y'`);
  await knex.raw(`create index pr_goods_cursor_idx on "${TABLE}" ("GOODS_NO") where "USE_YN" = 'Y' and "INDEX_YN" = 'N'`);
  await knex.raw(`create index pr_goods_mod_dtm_idx on "${TABLE}" ("SYS_MOD_DTM") where "USE_YN" = 'Y'`);

  await knex.raw(`create unlogged table ${ACCEPTED} (
    run_id text not null,
    goods_no varchar(20) not null,
    sys_mod_dtm timestamptz(3) not null
  )`);
  await knex.raw(`create index ${ACCEPTED}_run_idx on ${ACCEPTED} (run_id, goods_no)`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable(ACCEPTED);
  await knex.schema.dropTable(TABLE);
}

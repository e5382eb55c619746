import type { Knex } from "knex";

// Source tables of the product batch (docs/batch.md): the goods master, its sale price, dated
// promotions, display icons, the category tree and the goods-category link. Every table carries
// sys_mod_dtm so that an incremental batch can find what changed; the indexes serve exactly the
// batch's joins and "changed since" filters.

export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable("goods_category", (t) => {
    t.string("cate_cd", 20).primary();
    t.text("cate_nm").notNullable();
    t.string("parent_cate_cd", 20).references("cate_cd").inTable("goods_category").onDelete("SET NULL");
    t.text("use_yn").notNullable().defaultTo("Y").checkIn(["Y", "N"], "goods_category_use_yn_check");
    t.timestamp("sys_mod_dtm", { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable("goods_master", (t) => {
    t.string("goods_no", 20).primary();
    t.text("goods_nm").notNullable();
    t.text("brand_nm").notNullable().defaultTo("");
    t.text("img_url").notNullable().defaultTo("");
    t.text("use_yn").notNullable().defaultTo("Y").checkIn(["Y", "N"], "goods_master_use_yn_check");
    t.timestamp("sys_reg_dtm", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp("sys_mod_dtm", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(["sys_mod_dtm"], "goods_master_sys_mod_dtm_idx");
  });
  await knex.schema.createTable("goods_price", (t) => {
    t.string("goods_no", 20).primary().references("goods_no").inTable("goods_master").onDelete("CASCADE");
    t.integer("sale_price").notNullable().checkPositive("goods_price_sale_price_check");
    t.timestamp("sys_mod_dtm", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(["sys_mod_dtm"], "goods_price_sys_mod_dtm_idx");
  });
  await knex.schema.createTable("goods_promotion", (t) => {
    t.bigIncrements("promo_id").primary();
    t.string("goods_no", 20).notNullable().references("goods_no").inTable("goods_master").onDelete("CASCADE");
    t.text("promo_nm").notNullable().defaultTo("");
    t.integer("promo_price").notNullable().checkPositive("goods_promotion_promo_price_check");
    // Active while start_dtm <= now < end_dtm.
    t.timestamp("start_dtm", { useTz: true }).notNullable();
    t.timestamp("end_dtm", { useTz: true }).notNullable();
    t.text("use_yn").notNullable().defaultTo("Y").checkIn(["Y", "N"], "goods_promotion_use_yn_check");
    t.timestamp("sys_mod_dtm", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(["goods_no", "start_dtm", "end_dtm"], "goods_promotion_goods_period_idx");
  });
  await knex.raw(
    "alter table goods_promotion add constraint goods_promotion_period_check check (start_dtm < end_dtm)",
  );
  await knex.schema.createTable("goods_icon", (t) => {
    t.string("goods_no", 20).notNullable().references("goods_no").inTable("goods_master").onDelete("CASCADE");
    t.string("icon_cd", 20).notNullable();
    t.integer("sort_seq").notNullable().defaultTo(0);
    t.text("use_yn").notNullable().defaultTo("Y").checkIn(["Y", "N"], "goods_icon_use_yn_check");
    t.timestamp("sys_mod_dtm", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(["goods_no", "icon_cd"]);
  });
  await knex.schema.createTable("goods_category_link", (t) => {
    t.string("goods_no", 20).notNullable().references("goods_no").inTable("goods_master").onDelete("CASCADE");
    // Deliberately no foreign key to goods_category: a category may be deleted while links to it
    // remain, and the batch's clean-up step (1d) is what keeps the goods table consistent.
    t.string("cate_cd", 20).notNullable();
    // The one link per goods whose category is shown and indexed.
    t.text("main_yn").notNullable().defaultTo("N").checkIn(["Y", "N"], "goods_category_link_main_yn_check");
    t.timestamp("sys_mod_dtm", { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(["goods_no", "cate_cd"]);
  });
  await knex.raw(
    "create unique index goods_category_link_one_main_idx on goods_category_link (goods_no) where main_yn = 'Y'",
  );
  await knex.raw(CATEGORY_TREE_VIEW);
}

// Every category reachable from a root, with its path of names from the root and whether it can
// be shown: a category is usable only when it and all its ancestors are in use. The depth guard
// keeps a mistaken parent cycle from recursing forever (cycles simply never reach a root).
const CATEGORY_TREE_VIEW = `
create view goods_category_tree as
with recursive tree (cate_cd, cate_path, usable, depth) as (
  select cate_cd, cate_nm, use_yn = 'Y', 1
    from goods_category
   where parent_cate_cd is null
  union all
  select child.cate_cd, tree.cate_path || '>' || child.cate_nm, tree.usable and child.use_yn = 'Y', tree.depth + 1
    from goods_category child
    join tree on child.parent_cate_cd = tree.cate_cd
   where tree.depth < 16
)
select cate_cd, cate_path, usable from tree`;

export async function down(knex: Knex): Promise<void> {
  await knex.raw("drop view goods_category_tree");
  await knex.schema.dropTable("goods_category_link");
  await knex.schema.dropTable("goods_icon");
  await knex.schema.dropTable("goods_promotion");
  await knex.schema.dropTable("goods_price");
  await knex.schema.dropTable("goods_master");
  await knex.schema.dropTable("goods_category");
}

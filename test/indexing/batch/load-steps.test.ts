import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { loadGoods, LoadStepError } from "../../../src/indexing/batch/load-steps.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { ago, DAY, goodsRows, HOUR, insertCatalogue } from "./fixtures.js";

let db: TestDatabase;
const at = new Date("2026-11-21T16:00:00.000Z");

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

beforeEach(async () => {
  await db.knex.raw('truncate table "PR_GOODS_SEARCH_INTF", goods_category_link, goods_icon, goods_promotion, goods_price, goods_master, goods_category');
  await insertCatalogue(db.knex, at);
});

const pick = (rows: Awaited<ReturnType<typeof goodsRows>>) =>
  rows.map(({ GOODS_NO, SALE_PRICE, PROMO_PRICE, ICON_INFO, CATE_CD, CATE_PATH, USE_YN, INDEX_YN }) => ({
    GOODS_NO, SALE_PRICE, PROMO_PRICE, ICON_INFO, CATE_CD, CATE_PATH, USE_YN, INDEX_YN,
  }));

describe("full load (step 1 with 1a-1d)", () => {
  it("fills the table with exactly what the source tables say, every row INDEX_YN='N'", async () => {
    const result = await loadGoods(db.knex, { at });
    expect(result).toMatchObject({ isFullLoad: true, loadedCount: 4 });
    // the load writes each row once with its final values: 1a-1d, run over the whole table, find nothing left to change
    expect(result.changed).toEqual({ promotionPrices: 0, icons: 0, categories: 0, categoryCleanUp: 0 });
    expect(pick(await goodsRows(db.knex))).toEqual([
      // lowest active promotion wins; expired and disabled ones are ignored; icons in display order
      { GOODS_NO: "G1", SALE_PRICE: 50_000, PROMO_PRICE: 40_000, ICON_INFO: "NEW,SALE", CATE_CD: "C010101", CATE_PATH: "Fashion>Outer>Jackets", USE_YN: "Y", INDEX_YN: "N" },
      // a promotion that has not started does not count
      { GOODS_NO: "G2", SALE_PRICE: 120_000, PROMO_PRICE: null, ICON_INFO: "BEST", CATE_CD: "C0101", CATE_PATH: "Fashion>Outer", USE_YN: "Y", INDEX_YN: "N" },
      // category under an unused parent, and a missing category, give no category
      { GOODS_NO: "G3", SALE_PRICE: 30_000, PROMO_PRICE: null, ICON_INFO: null, CATE_CD: null, CATE_PATH: null, USE_YN: "Y", INDEX_YN: "N" },
      { GOODS_NO: "G4", SALE_PRICE: 10_000, PROMO_PRICE: null, ICON_INFO: null, CATE_CD: null, CATE_PATH: null, USE_YN: "N", INDEX_YN: "N" },
    ]);
  });

  it("builds the table's secondary indexes again after the insert, exactly as the migrations define them", async () => {
    const indexes = () =>
      db.knex.raw(`select indexname, indexdef from pg_indexes where tablename = 'PR_GOODS_SEARCH_INTF' order by indexname`).then((r) => r.rows);
    const before = await indexes();
    expect(before.length).toBeGreaterThan(1);
    const result = await loadGoods(db.knex, { at });
    expect(await indexes()).toEqual(before);
    expect(Object.keys(result.stepMs)).toEqual(["1-truncate", "1-load", "1-reindex", "1a-promotion-prices", "1b-icons", "1c-categories", "1d-category-clean-up"]);
    const invalid = await db.knex.raw(`select count(*)::int as n from pg_index where indrelid = '"PR_GOODS_SEARCH_INTF"'::regclass and not (indisvalid and indisready)`);
    expect(invalid.rows[0].n).toBe(0);
  });

  it("replaces the previous content: goods gone from the master disappear, indexed rows return to N", async () => {
    await loadGoods(db.knex, { at });
    await db.knex("PR_GOODS_SEARCH_INTF").update({ INDEX_YN: "Y" });
    await db.knex("goods_master").where({ goods_no: "G3" }).delete();
    const result = await loadGoods(db.knex, { at: new Date(at.getTime() + HOUR) });
    expect(result.loadedCount).toBe(3);
    const rows = await goodsRows(db.knex);
    expect(rows.map((r) => [r.GOODS_NO, r.INDEX_YN])).toEqual([["G1", "N"], ["G2", "N"], ["G4", "N"]]);
  });
});

describe("incremental load", () => {
  it("upserts exactly the goods whose master or price changed in the interval", async () => {
    await loadGoods(db.knex, { at: ago(at, 20 * 60_000) });
    await db.knex("PR_GOODS_SEARCH_INTF").update({ INDEX_YN: "Y" });
    const before = await goodsRows(db.knex);
    await db.knex("goods_master").where({ goods_no: "G2" }).update({ goods_nm: "Wool coat II", sys_mod_dtm: ago(at, 10 * 60_000) });
    await db.knex("goods_price").where({ goods_no: "G3" }).update({ sale_price: 28_000, sys_mod_dtm: ago(at, 5 * 60_000) });
    await db.knex("goods_master").insert({ goods_no: "G6", goods_nm: "New boots", sys_mod_dtm: ago(at, 60_000) });
    await db.knex("goods_price").insert({ goods_no: "G6", sale_price: 70_000, sys_mod_dtm: ago(at, 60_000) });
    // changed, but before the interval: not picked up
    await db.knex("goods_master").where({ goods_no: "G1" }).update({ goods_nm: "Rain jacket X", sys_mod_dtm: ago(at, 45 * 60_000) });

    const result = await loadGoods(db.knex, { at, intervalMinutes: 30 });

    expect(result).toMatchObject({ isFullLoad: false, loadedCount: 3 });
    const rows = await goodsRows(db.knex);
    const changed = rows.filter((r) => r.INDEX_YN === "N").map((r) => r.GOODS_NO);
    expect(changed).toEqual(["G2", "G3", "G6"]);
    expect(rows.find((r) => r.GOODS_NO === "G1")).toEqual(before.find((r) => r.GOODS_NO === "G1"));
    expect(rows.find((r) => r.GOODS_NO === "G2")).toMatchObject({ GOODS_NM: "Wool coat II", SYS_MOD_DTM: at });
    expect(rows.find((r) => r.GOODS_NO === "G3")).toMatchObject({ SALE_PRICE: 28_000 });
    expect(rows.find((r) => r.GOODS_NO === "G6")).toMatchObject({ SALE_PRICE: 70_000, CATE_CD: null });
  });

  it("still runs 1a-1d over the whole table, flagging only rows whose value changed", async () => {
    await loadGoods(db.knex, { at: ago(at, 20 * 60_000) });
    await db.knex("PR_GOODS_SEARCH_INTF").update({ INDEX_YN: "Y" });
    // none of these touch goods_master or goods_price, and all are stamped outside the interval
    const old = ago(at, DAY);
    await db.knex("goods_promotion").insert({ goods_no: "G3", promo_price: 27_000, start_dtm: old, end_dtm: new Date(at.getTime() + DAY), sys_mod_dtm: old });
    await db.knex("goods_icon").where({ goods_no: "G2" }).delete();
    await db.knex("goods_category").where({ cate_cd: "C0101" }).update({ cate_nm: "Outerwear" });
    await db.knex("goods_category").where({ cate_cd: "C02" }).update({ use_yn: "Y" });

    const result = await loadGoods(db.knex, { at, intervalMinutes: 30 });

    expect(result.loadedCount).toBe(0);
    expect(result.changed).toEqual({ promotionPrices: 1, icons: 1, categories: 3, categoryCleanUp: 0 });
    expect(pick(await goodsRows(db.knex))).toMatchObject([
      { GOODS_NO: "G1", CATE_PATH: "Fashion>Outerwear>Jackets", INDEX_YN: "N" },
      { GOODS_NO: "G2", ICON_INFO: null, CATE_PATH: "Fashion>Outerwear", INDEX_YN: "N" },
      { GOODS_NO: "G3", PROMO_PRICE: 27_000, CATE_CD: "C0201", CATE_PATH: "Retired>Old stock", INDEX_YN: "N" },
      { GOODS_NO: "G4", INDEX_YN: "Y" },
    ]);
  });

  it("clears the category of rows whose category was deleted or switched off (1d)", async () => {
    await loadGoods(db.knex, { at: ago(at, 20 * 60_000) });
    await db.knex("PR_GOODS_SEARCH_INTF").update({ INDEX_YN: "Y" });
    await db.knex("goods_category").where({ cate_cd: "C0101" }).update({ use_yn: "N" });

    const result = await loadGoods(db.knex, { at, intervalMinutes: 30 });

    expect(result.changed.categoryCleanUp).toBe(2);
    expect(pick(await goodsRows(db.knex)).filter((r) => r.INDEX_YN === "N")).toMatchObject([
      { GOODS_NO: "G1", CATE_CD: null, CATE_PATH: null },
      { GOODS_NO: "G2", CATE_CD: null, CATE_PATH: null },
    ]);
  });
});

describe("load failure", () => {
  it("names the failing step and leaves the previous table intact", async () => {
    await loadGoods(db.knex, { at: ago(at, HOUR) });
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G1" }).update({ INDEX_YN: "Y" });
    const before = await goodsRows(db.knex);
    await db.knex.raw("alter table goods_icon rename column icon_cd to icon_code");
    try {
      // the full load reads the icons in its insert, after the truncate; the incremental load in 1b
      for (const [options, step] of [[{ at }, "1-load"], [{ at, intervalMinutes: 30 }, "1b-icons"]] as const) {
        const failure = await loadGoods(db.knex, options).catch((err: unknown) => err);
        expect(failure).toBeInstanceOf(LoadStepError);
        expect((failure as LoadStepError).step).toBe(step);
        expect(await goodsRows(db.knex)).toEqual(before);
      }
    } finally {
      await db.knex.raw("alter table goods_icon rename column icon_code to icon_cd");
    }
  });
});

import type { Knex } from "knex";

// A small, hand-written source catalogue whose expected goods rows can be read off directly.
// Times are relative to `at`, the run time of the batch under test.

export const HOUR = 60 * 60 * 1000;
export const DAY = 24 * HOUR;

export function ago(at: Date, ms: number): Date {
  return new Date(at.getTime() - ms);
}

export async function insertCatalogue(knex: Knex, at: Date): Promise<void> {
  const old = ago(at, 2 * DAY);
  await knex("goods_category").insert([
    { cate_cd: "C01", cate_nm: "Fashion", parent_cate_cd: null, sys_mod_dtm: old },
    { cate_cd: "C0101", cate_nm: "Outer", parent_cate_cd: "C01", sys_mod_dtm: old },
    { cate_cd: "C010101", cate_nm: "Jackets", parent_cate_cd: "C0101", sys_mod_dtm: old },
    { cate_cd: "C02", cate_nm: "Retired", parent_cate_cd: null, use_yn: "N", sys_mod_dtm: old },
    { cate_cd: "C0201", cate_nm: "Old stock", parent_cate_cd: "C02", sys_mod_dtm: old },
  ]);
  const goods = (no: string, name: string, useYn = "Y") => ({
    goods_no: no,
    goods_nm: name,
    brand_nm: "Aurora",
    img_url: `/images/${no}.jpg`,
    use_yn: useYn,
    sys_reg_dtm: ago(at, 30 * DAY),
    sys_mod_dtm: old,
  });
  await knex("goods_master").insert([
    goods("G1", "Rain jacket"),
    goods("G2", "Wool coat"),
    goods("G3", "Linen shirt"),
    goods("G4", "Discontinued scarf", "N"),
    goods("G5", "Unpriced sample"),
  ]);
  await knex("goods_price").insert(
    [
      ["G1", 50_000],
      ["G2", 120_000],
      ["G3", 30_000],
      ["G4", 10_000],
    ].map(([goods_no, sale_price]) => ({ goods_no, sale_price, sys_mod_dtm: old })),
  );
  const promo = (no: string, price: number, startMs: number, endMs: number, useYn = "Y") => ({
    goods_no: no,
    promo_price: price,
    start_dtm: new Date(at.getTime() + startMs),
    end_dtm: new Date(at.getTime() + endMs),
    use_yn: useYn,
    sys_mod_dtm: old,
  });
  await knex("goods_promotion").insert([
    promo("G1", 45_000, -DAY, DAY), // active
    promo("G1", 40_000, -HOUR, HOUR), // active and lower: wins
    promo("G1", 20_000, -10 * DAY, -DAY), // expired
    promo("G2", 90_000, DAY, 2 * DAY), // not started yet
    promo("G3", 25_000, -DAY, DAY, "N"), // switched off
  ]);
  await knex("goods_icon").insert([
    { goods_no: "G1", icon_cd: "SALE", sort_seq: 2, sys_mod_dtm: old },
    { goods_no: "G1", icon_cd: "NEW", sort_seq: 1, sys_mod_dtm: old },
    { goods_no: "G1", icon_cd: "HIDDEN", sort_seq: 0, use_yn: "N", sys_mod_dtm: old },
    { goods_no: "G2", icon_cd: "BEST", sort_seq: 1, sys_mod_dtm: old },
  ]);
  await knex("goods_category_link").insert([
    { goods_no: "G1", cate_cd: "C010101", main_yn: "Y", sys_mod_dtm: old },
    { goods_no: "G1", cate_cd: "C0101", main_yn: "N", sys_mod_dtm: old },
    { goods_no: "G2", cate_cd: "C0101", main_yn: "Y", sys_mod_dtm: old },
    { goods_no: "G3", cate_cd: "C0201", main_yn: "Y", sys_mod_dtm: old }, // parent out of use
    { goods_no: "G4", cate_cd: "C999", main_yn: "Y", sys_mod_dtm: old }, // category gone
  ]);
}

export interface GoodsRow {
  GOODS_NO: string;
  GOODS_NM: string;
  SALE_PRICE: number;
  PROMO_PRICE: number | null;
  ICON_INFO: string | null;
  CATE_CD: string | null;
  CATE_PATH: string | null;
  USE_YN: string;
  INDEX_YN: string;
  SYS_MOD_DTM: Date;
}

export async function goodsRows(knex: Knex): Promise<GoodsRow[]> {
  return knex("PR_GOODS_SEARCH_INTF").select("*").orderBy("GOODS_NO");
}

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe("goods generator", () => {
  it("inserts the requested number of realistic rows, every tenth one USE_YN='N', all INDEX_YN='N'", async () => {
    expect(await generateGoods(db.knex, { rows: 2000 })).toBe(2000);
    const { rows } = await db.knex.raw(`
      select count(*)::int as total,
             count(distinct "GOODS_NO")::int as distinct_keys,
             count(*) filter (where "USE_YN" = 'N')::int as unused,
             count(*) filter (where "INDEX_YN" = 'N')::int as unindexed,
             count(*) filter (where "PROMO_PRICE" is not null)::int as promoted,
             count(*) filter (where "PROMO_PRICE" >= "SALE_PRICE")::int as bad_promos,
             count(*) filter (where "SALE_PRICE" < 1000 or "SALE_PRICE" > 500000 or "SALE_PRICE" % 100 <> 0)::int as bad_prices,
             count(distinct "BRAND_NM")::int as brands,
             count(distinct "CATE_CD")::int as categories,
             count(*) filter (where "CATE_PATH" !~ '^[^>]+>[^>]+>[^>]+$')::int as bad_paths,
             count(*) filter (where "SYS_MOD_DTM" < "SYS_REG_DTM" or "SYS_MOD_DTM" > now())::int as bad_dates
        from "PR_GOODS_SEARCH_INTF"`);
    expect(rows[0]).toEqual({
      total: 2000,
      distinct_keys: 2000,
      unused: 200,
      unindexed: 2000,
      promoted: 400,
      bad_promos: 0,
      bad_prices: 0,
      brands: 16,
      categories: 120,
      bad_paths: 0,
      bad_dates: 0,
    });
  });

  it("continues numbering from firstNo and gives the same data for the same numbers", async () => {
    await generateGoods(db.knex, { rows: 5, firstNo: 10_001, unusedEvery: 0 });
    const first = await db.knex("PR_GOODS_SEARCH_INTF").where("GOODS_NO", ">=", "G0000010001").orderBy("GOODS_NO").select("GOODS_NO", "GOODS_NM", "SALE_PRICE");
    expect(first.map((r) => r.GOODS_NO)).toEqual(["G0000010001", "G0000010002", "G0000010003", "G0000010004", "G0000010005"]);
    await db.knex("PR_GOODS_SEARCH_INTF").where("GOODS_NO", ">=", "G0000010001").delete();
    await generateGoods(db.knex, { rows: 5, firstNo: 10_001, unusedEvery: 0 });
    const again = await db.knex("PR_GOODS_SEARCH_INTF").where("GOODS_NO", ">=", "G0000010001").orderBy("GOODS_NO").select("GOODS_NO", "GOODS_NM", "SALE_PRICE");
    expect(again).toEqual(first);
  });

  it("refuses a negative row count", async () => {
    await expect(generateGoods(db.knex, { rows: -1 })).rejects.toThrow(RangeError);
  });
});

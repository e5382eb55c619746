import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadGoods } from "../../../src/indexing/batch/load-steps.js";
import { generateSources, goodsNo } from "../../../src/indexing/batch/source-generator.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

let db: TestDatabase;
const at = new Date("2026-11-21T03:00:00.000Z");
const N = 3000;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateSources(db.knex, { goods: N, at });
});

afterAll(async () => {
  await db?.drop();
});

async function count(sql: string): Promise<number> {
  const { rows } = await db.knex.raw<{ rows: Array<{ n: string }> }>(`select count(*) as n from ${sql}`);
  return Number(rows[0]!.n);
}

describe("generateSources", () => {
  it("gives every goods a price and exactly one main category link", async () => {
    expect(await count("goods_master")).toBe(N);
    expect(await count("goods_price")).toBe(N);
    expect(await count("goods_category_link where main_yn = 'Y'")).toBe(N);
    expect(await count("goods_category_tree")).toBe(125);
  });

  it("produces data the full load turns into N rows with promotions, icons and categories as designed", async () => {
    const result = await loadGoods(db.knex, { at });
    expect(result.loadedCount).toBe(N);
    // active promotions on every 3rd goods (the 15th's second one is also active)
    expect(await count(`"PR_GOODS_SEARCH_INTF" where "PROMO_PRICE" is not null`)).toBe(N / 3);
    expect(await count(`"PR_GOODS_SEARCH_INTF" where "USE_YN" = 'N'`)).toBe(N / 50);
    // every 7th leaf is out of use, so some goods lose their category but most keep it
    const withCategory = await count(`"PR_GOODS_SEARCH_INTF" where "CATE_CD" is not null`);
    expect(withCategory).toBeGreaterThan(N * 0.8);
    expect(withCategory).toBeLessThan(N);
    const g60 = await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: goodsNo(60) }).first();
    // 60 is a multiple of 3, 4, 5, 6, 10, 15 and 20: two active promotions (80%, 70%), NEW and BEST
    // icons (FREE_SHIP switched off on every 20th)
    expect(g60.PROMO_PRICE).toBe(Math.floor((g60.SALE_PRICE * 70) / 100));
    expect(g60.ICON_INFO).toBe("NEW,BEST");
  });

  it("replaces earlier data instead of adding to it", async () => {
    await generateSources(db.knex, { goods: 10, at });
    expect(await count("goods_master")).toBe(10);
  });
});

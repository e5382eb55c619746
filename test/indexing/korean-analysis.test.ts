import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { runGoodsIndexing } from "../../src/indexing/modes.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { deleteGoodsIndices, testRunOptions } from "./helpers.js";

// Shoppers type a part of a compound word, or a word with its particle: the default cjk analyzer
// (overlapping bigrams) finds the products all the same.

let db: TestDatabase;
const es = createTestElasticsearch();
const index = uniqueIndexName("goods_korean");

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 320, unusedEvery: 0 });
  await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "full" });
});

afterAll(async () => {
  await deleteGoodsIndices(es, index);
  await db?.drop();
  await es.close();
});

async function matching(text: string): Promise<string[]> {
  const result = await es.search<{ GOODS_NM: string }>({ index, size: 1000, query: { match: { GOODS_NM: text } } });
  return result.hits.hits.map((hit) => hit._source!.GOODS_NM);
}

describe("Korean text analysis (default cjk)", () => {
  it("maps the names, brands and category paths with the cjk analyzer", async () => {
    const mapping = Object.values(await es.indices.getMapping({ index }))[0]!.mappings.properties!;
    for (const field of ["GOODS_NM", "BRAND_NM", "CATE_PATH"]) expect(mapping[field]).toMatchObject({ type: "text", analyzer: "cjk" });
  });

  it("finds every 무선이어폰 goods by 이어폰 and by 이어폰을, ranked before anything else", async () => {
    const named = Number((await db.knex("PR_GOODS_SEARCH_INTF").where("GOODS_NM", "like", "%무선이어폰%").count({ n: "*" }).first())!.n);
    expect(named).toBeGreaterThan(0);
    for (const text of ["이어폰", "이어폰을"]) {
      const found = await matching(text);
      // a match query ORs the bigrams, so 에어프라이어 (sharing 이어) may follow, never lead
      expect(found.slice(0, named).every((name) => name.includes("무선이어폰"))).toBe(true);
      expect(found.filter((name) => name.includes("무선이어폰"))).toHaveLength(named);
    }
  });
});

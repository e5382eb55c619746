import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { runGoodsIndexing } from "../../src/indexing/modes.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { documentCount, testRunOptions, deleteGoodsIndices } from "./helpers.js";

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_incremental");
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  // Generated rows were modified a day or more ago; move a few into the last minutes.
  await generateGoods(db.knex, { rows: 400, unusedEvery: 10 });
  await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SYS_MOD_DTM" = now() - interval '5 minutes' where "GOODS_NO" between 'G0000000001' and 'G0000000030'`);
  await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SYS_MOD_DTM" = now() - interval '50 minutes' where "GOODS_NO" between 'G0000000031' and 'G0000000050'`);
});

afterAll(async () => {
  await deleteGoodsIndices(es, index);
  await db?.drop();
  await es.close();
});

async function indexedIds(): Promise<string[]> {
  await es.indices.refresh({ index });
  const response = await es.search({ index, size: 1000, _source: false, sort: ["GOODS_NO"] });
  return response.hits.hits.map((hit) => hit._id as string);
}

async function expectedIds(minutes: number): Promise<string[]> {
  const rows = await db.knex("PR_GOODS_SEARCH_INTF")
    .where({ USE_YN: "Y" })
    .andWhereRaw(`"SYS_MOD_DTM" >= now() - make_interval(mins => ?)`, [minutes])
    .orderBy("GOODS_NO")
    .select("GOODS_NO");
  return rows.map((r) => r.GOODS_NO as string);
}

describe("incremental mode", () => {
  it("indexes exactly the USE_YN='Y' rows modified within the window", async () => {
    const result = await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "incremental", intervalMinutes: 10 });

    const expected = await expectedIds(10);
    expect(expected).toHaveLength(27); // 30 rows in the window, every 10th is USE_YN='N'
    expect(result).toMatchObject({ mode: "incremental", fetchedCount: 27, indexedCount: 27, failedCount: 0 });
    expect(await indexedIds()).toEqual(expected);
  });

  it("widens with the window and changes nothing when a range is indexed again", async () => {
    const wider = await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "incremental", intervalMinutes: 60 });
    expect(wider.fetchedCount).toBe(45);
    const ids = await indexedIds();
    expect(ids).toEqual(await expectedIds(60));
    const before = await es.mget({ index, ids });

    const again = await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "incremental", intervalMinutes: 60 });
    expect(again).toMatchObject({ fetchedCount: 45, indexedCount: 45, failedCount: 0 });
    expect(await documentCount(es, index)).toBe(45);
    const after = await es.mget({ index, ids });
    expect(after.docs.map((d) => ("_source" in d ? d._source : undefined))).toEqual(before.docs.map((d) => ("_source" in d ? d._source : undefined)));
  });

  it("does not touch INDEX_YN", async () => {
    const flags = await db.knex("PR_GOODS_SEARCH_INTF").where({ INDEX_YN: "Y" }).count({ n: "*" });
    expect(flags[0]).toEqual({ n: "0" });
  });
});

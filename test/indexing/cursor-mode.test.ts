import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { goodsMapping } from "../../src/indexing/goods/goods-index.js";
import { IndexingError } from "../../src/indexing/indexing-error.js";
import { runGoodsIndexing } from "../../src/indexing/modes.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { documentCount, flagCounts, flagOf, indexSettings, testRunOptions, deleteGoodsIndices } from "./helpers.js";

const es = createTestElasticsearch();
let db: TestDatabase;
let index: string;

beforeEach(async () => {
  db = await createTestDatabase();
  index = uniqueIndexName("goods_cursor");
  await generateGoods(db.knex, { rows: 500, unusedEvery: 10 });
});

afterEach(async () => {
  await deleteGoodsIndices(es, index);
  await db.drop();
});

afterAll(async () => {
  await es.close();
});

const cursorRun = (extra: Partial<Parameters<typeof runGoodsIndexing>[0]> = {}) =>
  runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "cursor", ...extra });

describe("cursor mode", () => {
  it("indexes the INDEX_YN='N' rows and flips them to 'Y'", async () => {
    await db.knex("PR_GOODS_SEARCH_INTF").whereIn("GOODS_NO", ["G0000000001", "G0000000002"]).update({ INDEX_YN: "Y" });

    const result = await cursorRun();

    // The 50 USE_YN='N' rows are flipped too: their (absent) documents are removed, 404 counts as done.
    expect(result).toMatchObject({ mode: "cursor", fetchedCount: 448, indexedCount: 448, failedCount: 0, removedCount: 0, finalizedCount: 498 });
    expect(await documentCount(es, index)).toBe(448);
    expect(await flagCounts(db.knex)).toEqual({ Y: 450 });
    expect(await db.knex("PR_GOODS_SEARCH_INTF").where({ INDEX_YN: "N" }).count({ n: "*" })).toEqual([{ n: "0" }]);
  });

  it("keeps a row inserted and a row modified while the run is in progress at 'N' and indexes them on the next run", async () => {
    let settled = 0;
    const first = await cursorRun({
      // One bulk in flight, so bulks settle in the order they were read.
      bulksInFlight: 1,
      onBulkSettled: async () => {
        // Bulk 1 is the removal pass (the 50 USE_YN='N' rows); bulk 2 is the first of the goods rows.
        if (++settled !== 2) return;
        // G0000000001 was read in the first bulk (already flipped), G0000000499 is read later; both
        // change now, flagged 'N' as every writer of the table does (the batch's loads).
        await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "GOODS_NM" = 'changed ' || "GOODS_NO", "SYS_MOD_DTM" = now() + interval '1 second', "INDEX_YN" = 'N'
                            where "GOODS_NO" in ('G0000000001', 'G0000000499')`);
        await generateGoods(db.knex, { rows: 1, firstNo: 9001, unusedEvery: 0 });
      },
    });

    // G0000000001's bulk flipped it before the change; G0000000499's flip finds a newer version and leaves it.
    expect(first).toMatchObject({ fetchedCount: 450, indexedCount: 450, finalizedCount: 449 + 50 });
    expect(await flagOf(db.knex, "G0000000001")).toBe("N");
    expect(await flagOf(db.knex, "G0000000499")).toBe("N");
    expect(await flagOf(db.knex, "G0000009001")).toBe("N");

    const second = await cursorRun();
    expect(second).toMatchObject({ fetchedCount: 3, indexedCount: 3, finalizedCount: 3 });
    expect(await flagCounts(db.knex)).toEqual({ Y: 451 });
    const doc = await es.get<{ GOODS_NM: string }>({ index, id: "G0000000499" });
    expect(doc._source?.GOODS_NM).toBe("changed G0000000499");
    expect(await documentCount(es, index)).toBe(451);
  });

  it("leaves the row of a document Elasticsearch rejected at 'N'", async () => {
    // An index whose SALE_PRICE is a byte rejects exactly the one row priced above 127.
    await es.indices.create({ index, mappings: { ...goodsMapping("standard"), properties: { ...goodsMapping("standard").properties, SALE_PRICE: { type: "byte" } } } });
    await db.knex("PR_GOODS_SEARCH_INTF").update({ SALE_PRICE: 100 });
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000007" }).update({ SALE_PRICE: 50_000 });

    const result = await cursorRun();

    expect(result).toMatchObject({ fetchedCount: 450, indexedCount: 449, failedCount: 1, finalizedCount: 449 + 50 });
    expect(await flagOf(db.knex, "G0000000007")).toBe("N");
    expect(await flagCounts(db.knex)).toEqual({ Y: 449, N: 1 });
  });

  it("stops at the first bulk whose flip fails, leaves every row at 'N', and the next run re-indexes them without duplicates", async () => {
    await db.knex.raw(`create function refuse_flag() returns trigger language plpgsql as $$
                       begin raise exception 'flag updates refused for the test'; end $$`);
    await db.knex.raw(`create trigger refuse_flag before update of "INDEX_YN" on "PR_GOODS_SEARCH_INTF" for each statement execute function refuse_flag()`);

    const error = await cursorRun().catch((err: unknown) => err);
    expect(error).toBeInstanceOf(IndexingError);
    expect((error as IndexingError).code).toBe("FINALIZE_FAILED");
    expect(await flagCounts(db.knex)).toEqual({ N: 450 });
    // The flip runs as each bulk settles: the run stops before reading everything.
    expect(await documentCount(es, index)).toBeLessThan(450);

    await db.knex.raw(`drop trigger refuse_flag on "PR_GOODS_SEARCH_INTF"`);
    const retry = await cursorRun();
    expect(retry).toMatchObject({ fetchedCount: 450, indexedCount: 450, finalizedCount: 450 + 50 });
    expect(await flagCounts(db.knex)).toEqual({ Y: 450 });
    expect(await documentCount(es, index)).toBe(450);
  });
  it("pauses the live index's refreshes once a large run has sent enough documents, and restores them when it ends", async () => {
    const seen: Array<string | undefined> = [];
    const result = await cursorRun({
      pauseRefreshAfterDocs: 200,
      onBulkSettled: async () => void seen.push((await indexSettings(es, index)).refresh),
    });

    expect(result).toMatchObject({ indexedCount: 450, failedCount: 0 });
    // Refresh 1s until 200 documents were sent, paused from then on, 1s again after the run.
    expect(seen[0]).toBe("1s");
    expect(seen.at(-1)).toBe("-1");
    expect(await indexSettings(es, index)).toEqual({ refresh: "1s", replicas: "1" });
    // The run's documents are searchable when it answers, without waiting for a refresh.
    expect((await es.count({ index })).count).toBe(450);
  });

  it("lifts a pause left by a run that died before the next run writes", async () => {
    await cursorRun();
    await es.indices.putSettings({ index, settings: { index: { refresh_interval: "-1" } } });
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000001" }).update({ GOODS_NM: "changed", INDEX_YN: "N" });

    await cursorRun();

    expect(await indexSettings(es, index)).toEqual({ refresh: "1s", replicas: "1" });
  });
});

import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { generateSources } from "../../src/indexing/batch/source-generator.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { measureDrift } from "../../src/indexing/goods/index-status.js";
import { runGoodsIndexing } from "../../src/indexing/modes.js";
import type { IndexingMode } from "../../src/indexing/goods/goods-rows.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { createBatchHarness, deleteHarnessIndexes } from "./batch/harness.js";
import { deleteGoodsIndices, flagOf, testRunOptions } from "./helpers.js";

// The index tells the truth (SPEC.md section 3): the alias life cycle of full runs, removals of
// delisted and deleted products by cursor and incremental runs, the batch's rebuild, and drift.

const es = createTestElasticsearch();
let db: TestDatabase;
let index: string;

beforeEach(async () => {
  db = await createTestDatabase();
  index = uniqueIndexName("goods_truth");
});

afterEach(async () => {
  await deleteGoodsIndices(es, index);
  await deleteHarnessIndexes(es);
  await db.drop();
});

afterAll(async () => {
  await es.close();
});

const run = (mode: IndexingMode, extra: Partial<Parameters<typeof runGoodsIndexing>[0]> = {}) =>
  runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode, intervalMinutes: mode === "incremental" ? 5 : undefined, ...extra });

const exists = (id: string) => es.exists({ index, id });
const aliasTargets = async () => Object.keys(await es.indices.getAlias({ name: index }));

describe("full runs behind the alias", () => {
  it("never show a search fewer documents than the previous run, show the new ones right after the swap, and delete the old index", async () => {
    await generateGoods(db.knex, { rows: 3000, unusedEvery: 10 });
    await run("full");
    const [previous] = await aliasTargets();
    expect((await es.count({ index })).count).toBe(2700);
    await generateGoods(db.knex, { rows: 50, firstNo: 9001, unusedEvery: 0 });

    const counts: number[] = [];
    let done = false;
    const searching = (async () => {
      while (!done) counts.push((await es.count({ index })).count);
    })();
    // Slow bulks: the searches run many times while the new index fills.
    await run("full", { onBulkSettled: () => new Promise((resolve) => setTimeout(resolve, 20)) });
    const rightAfter = (await es.count({ index })).count;
    done = true;
    await searching;

    expect(counts.length).toBeGreaterThan(10);
    expect(Math.min(...counts)).toBe(2700);
    expect(rightAfter).toBe(2750);
    expect(await exists("G0000009001")).toBe(true);
    expect(await aliasTargets()).not.toContain(previous);
    expect(await es.indices.exists({ index: previous! })).toBe(false);
  });

  it("leaves the alias on the old index and no partial index when a run is stopped midway", async () => {
    await generateGoods(db.knex, { rows: 2000, unusedEvery: 0 });
    await run("full");
    const before = await aliasTargets();
    const stop = new AbortController();
    const stopped = await run("full", { signal: stop.signal, onBulkSettled: (stats) => void (stats.bulks === 5 && stop.abort(new Error("stop"))) }).catch((err: unknown) => err);

    expect(stopped).toBeInstanceOf(Error);
    expect(await aliasTargets()).toEqual(before);
    expect(Object.keys(await es.indices.get({ index: `${index}_*` }))).toEqual(before);
    expect((await es.count({ index })).count).toBe(2000);
  });
});

describe("delisted products", () => {
  beforeEach(async () => {
    await generateGoods(db.knex, { rows: 200, unusedEvery: 0 });
    await run("cursor");
  });

  it("leave and come back through cursor runs: USE_YN Y -> N -> Y", async () => {
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000005" }).update({ USE_YN: "N", INDEX_YN: "N", SYS_MOD_DTM: db.knex.raw("now()") });
    const off = await run("cursor");
    expect(off).toMatchObject({ fetchedCount: 0, removedCount: 1, finalizedCount: 1 });
    expect(await exists("G0000000005")).toBe(false);
    expect(await flagOf(db.knex, "G0000000005")).toBe("Y");

    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000005" }).update({ USE_YN: "Y", INDEX_YN: "N", SYS_MOD_DTM: db.knex.raw("now()") });
    const on = await run("cursor");
    expect(on).toMatchObject({ fetchedCount: 1, indexedCount: 1, removedCount: 0 });
    expect(await exists("G0000000005")).toBe(true);
    expect(on.drift).toBe(0);
  });

  it("leave and come back through incremental runs: USE_YN Y -> N -> Y", async () => {
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000006" }).update({ USE_YN: "N", SYS_MOD_DTM: db.knex.raw("now()") });
    const off = await run("incremental");
    expect(off).toMatchObject({ fetchedCount: 0, removedCount: 1 });
    expect(await exists("G0000000006")).toBe(false);
    expect(off.drift).toBe(0);

    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000006" }).update({ USE_YN: "Y", SYS_MOD_DTM: db.knex.raw("now()") });
    const on = await run("incremental");
    expect(on).toMatchObject({ fetchedCount: 1, indexedCount: 1, removedCount: 0 });
    expect(await exists("G0000000006")).toBe(true);
  });
});

describe("deleted rows", () => {
  beforeEach(async () => {
    await generateGoods(db.knex, { rows: 200, unusedEvery: 0 });
    await run("full");
  });

  it.each(["cursor", "incremental"] as const)("lose their documents in the next %s run, once", async (mode) => {
    await db.knex("PR_GOODS_SEARCH_INTF").whereIn("GOODS_NO", ["G0000000007", "G0000000008"]).delete();
    const result = await run(mode);
    expect(result).toMatchObject({ removedCount: 2, drift: 0 });
    expect(await exists("G0000000007")).toBe(false);
    expect(await db.knex("goods_index_deleted").count({ n: "*" })).toEqual([{ n: "0" }]);
    expect(await run(mode)).toMatchObject({ removedCount: 0 });
  });

  it("keep a product deleted and inserted again in the index", async () => {
    await db.knex("PR_GOODS_SEARCH_INTF").update({ INDEX_YN: "Y" });
    const [row] = await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000009" });
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000009" }).delete();
    await db.knex("PR_GOODS_SEARCH_INTF").insert({ ...row, INDEX_YN: "N", SYS_MOD_DTM: db.knex.raw("now()") });
    const result = await run("cursor");
    expect(result).toMatchObject({ fetchedCount: 1, indexedCount: 1, removedCount: 0 });
    expect(await exists("G0000000009")).toBe(true);
  });
});

describe("drift", () => {
  it("is 0 after each kind of run on a quiet table, and not 0 when rows change behind its back", async () => {
    await generateGoods(db.knex, { rows: 300, unusedEvery: 10 });
    expect((await run("full")).drift).toBe(0);
    expect((await run("cursor")).drift).toBe(0);
    expect((await run("incremental")).drift).toBe(0);

    await db.knex("PR_GOODS_SEARCH_INTF").whereIn("GOODS_NO", ["G0000000001", "G0000000002"]).update({ USE_YN: "N" });
    await generateGoods(db.knex, { rows: 5, firstNo: 9001, unusedEvery: 0 });
    expect(await measureDrift(db.knex, es, index)).toMatchObject({ eligibleRows: 273, documentCount: 270, pendingRows: 5, drift: 3 });
  });
});

describe("the batch's full load", () => {
  it("rebuilds: a product removed from the sources between two full loads is not found afterwards", async () => {
    await generateSources(db.knex, { goods: 300 });
    const h = createBatchHarness({ knex: db.knex, databaseUrl: db.url, elasticsearch: es });
    const first = await h.batch.run({});
    expect(first).toMatchObject({ status: "COMPLETED", warnings: [] });
    const { count: before } = await es.count({ index: h.goodsIndex });
    const removed = (await db.knex("PR_GOODS_SEARCH_INTF").where({ USE_YN: "Y" }).orderBy("GOODS_NO").first("GOODS_NO")).GOODS_NO as string;
    expect(await es.exists({ index: h.goodsIndex, id: removed })).toBe(true);

    await db.knex("goods_master").where({ goods_no: removed }).delete();
    const second = await h.batch.run({});

    expect(second).toMatchObject({ status: "COMPLETED", warnings: [] });
    expect(await es.exists({ index: h.goodsIndex, id: removed })).toBe(false);
    expect((await es.count({ index: h.goodsIndex })).count).toBe(before - 1);
    expect((await measureDrift(db.knex, es, h.goodsIndex)).drift).toBe(0);
    expect((await h.logs.list(1))[0]?.details).toMatchObject({ drift: 0 });
  });
});

import type { Client } from "@elastic/elasticsearch";
import pino from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { kstTimestamp } from "../../../src/indexing/kst-timestamp.js";
import type { BatchResult } from "../../../src/indexing/batch/batch-service.js";
import { OperationFailedError } from "../../../src/errors.js";
import { runGoodsIndexing } from "../../../src/indexing/modes.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { goodsRows, insertCatalogue } from "./fixtures.js";
import { createBatchHarness, cursorIndexer, deleteHarnessIndexes, unreachableElasticsearch, type BatchHarness } from "./harness.js";

let db: TestDatabase;
let es: Client;
let h: BatchHarness;

beforeAll(async () => {
  db = await createTestDatabase();
  es = createTestElasticsearch();
});

afterAll(async () => {
  await deleteHarnessIndexes(es);
  await db?.drop();
  await es?.close();
});

beforeEach(async () => {
  await db.knex.raw('truncate table "PR_GOODS_SEARCH_INTF", goods_category_link, goods_icon, goods_promotion, goods_price, goods_master, goods_category');
  await insertCatalogue(db.knex, new Date());
  h = createBatchHarness({ knex: db.knex, databaseUrl: db.url, elasticsearch: es });
});

async function indexedDocs(index: string) {
  const { hits } = await es.search<Record<string, unknown>>({ index, size: 100, sort: [{ GOODS_NO: "asc" }] });
  return hits.hits.map((hit) => hit._source!);
}

async function rejection(promise: Promise<unknown>): Promise<OperationFailedError> {
  const err = await promise.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(OperationFailedError);
  return err as OperationFailedError;
}

describe("full batch", () => {
  let result: BatchResult;

  it("loads, indexes every eligible row, flips it to Y and answers COMPLETED", async () => {
    result = await h.batch.run({});
    expect(result).toMatchObject({
      success: true,
      status: "COMPLETED",
      isFullLoad: true,
      loadedCount: 4,
      fetchedCount: 3, // G4 is USE_YN='N'
      indexedCount: 3,
      failedCount: 0,
      chunkSize: 50_000,
      warnings: [],
    });
    expect(result.batchId).toMatch(/^product_\d{17}$/);
    const rows = await goodsRows(db.knex);
    // G4 (USE_YN='N') is flipped too: the rebuilt index never had its document.
    expect(rows.map((r) => [r.GOODS_NO, r.INDEX_YN])).toEqual([["G1", "Y"], ["G2", "Y"], ["G3", "Y"], ["G4", "Y"]]);
    const docs = await indexedDocs(h.goodsIndex);
    expect(docs.map((d) => d.GOODS_NO)).toEqual(["G1", "G2", "G3"]);
    expect(docs[0]).toMatchObject({ SALE_PRICE: 50_000, PROMO_PRICE: 40_000, ICON_INFO: "NEW,SALE", CATE_PATH: "Fashion>Outer>Jackets" });

    const [log, ...others] = await h.logs.list(10);
    expect(others).toEqual([]);
    expect(log).toMatchObject({
      batch_id: result.batchId,
      job_name: "product_batch",
      status: "COMPLETED",
      details: { fetched_count: 3, indexed_count: 3, failed_count: 0, job_type: "full", chunk_size: 50_000, target_index: h.goodsIndex, source_index: "PR_GOODS_SEARCH_INTF" },
    });
    expect(log!.details.error).toBeUndefined();
    // the id is the KST rendering of the logged start time
    expect(log!.batch_id).toBe(`product_${kstTimestamp(new Date(log!.started_at))}`);
    expect(log!.elapsed_ms).toBe(new Date(log!.finished_at).getTime() - new Date(log!.started_at).getTime());
  });
});

describe("incremental batch", () => {
  it("indexes exactly the changed source rows", async () => {
    await h.batch.run({});
    await db.knex("goods_master").where({ goods_no: "G2" }).update({ goods_nm: "Wool coat II", sys_mod_dtm: new Date() });
    const result = await h.batch.run({ intervalMinutes: 5 });
    expect(result).toMatchObject({ isFullLoad: false, loadedCount: 1, fetchedCount: 1, indexedCount: 1 });
    expect((await indexedDocs(h.goodsIndex)).find((d) => d.GOODS_NO === "G2")).toMatchObject({ GOODS_NM: "Wool coat II" });
    expect((await h.logs.list(1))[0]!.details).toMatchObject({ job_type: "incremental", fetched_count: 1 });
  });

  it("rejects interval_minutes below 1", async () => {
    await expect(h.batch.run({ intervalMinutes: 0 })).rejects.toThrow(/interval_minutes/);
  });
});

describe("chunk_size", () => {
  it("passes the clamped value to step 2 as bulk size and reports the change", async () => {
    const low = await h.batch.run({ chunkSize: 500 });
    const high = await h.batch.run({ chunkSize: 500_000 });
    expect([low.chunkSize, high.chunkSize]).toEqual([10_000, 100_000]);
    expect(low.warnings).toEqual([expect.stringMatching(/raised to 10000/)]);
    expect(high.warnings).toEqual([expect.stringMatching(/lowered to 100000/)]);
    expect(h.bulkSizes).toEqual([10_000, 100_000]);
  });
});

describe("failures", () => {
  it("a load failure answers FAILED with LOAD_FAILED, saves a FAILED log and leaves the table unchanged", async () => {
    await h.batch.run({});
    const before = await goodsRows(db.knex);
    await db.knex.raw("alter table goods_price rename to goods_price_broken");
    try {
      const err = await rejection(h.batch.run({}));
      expect(err.extra).toMatchObject({ status: "FAILED", code: "LOAD_FAILED", batch_id: expect.stringMatching(/^product_/) });
      expect(await goodsRows(db.knex)).toEqual(before);
      const [log] = await h.logs.list(1);
      expect(log).toMatchObject({ batch_id: err.extra!.batch_id, status: "FAILED", details: { error: { code: "LOAD_FAILED", step: "load" } } });
    } finally {
      await db.knex.raw("alter table goods_price_broken rename to goods_price");
    }
  });

  it("a rebuild whose alias move fails is a warning: 200 COMPLETED with ALIAS_SWAP_FAILED, the alias still on the previous index", async () => {
    await h.batch.run({});
    const [previous] = Object.keys(await es.indices.getAlias({ name: h.goodsIndex }));
    // A read-only index refuses metadata changes, and so the removal of its alias.
    await es.indices.putSettings({ index: previous!, settings: { "index.blocks.read_only": true } });
    try {
      const result = await h.batch.run({});
      expect(result).toMatchObject({ success: true, status: "COMPLETED", loadedCount: 4 });
      expect(result.warnings).toEqual([expect.stringMatching(/indexing failed \(ALIAS_SWAP_FAILED\)/)]);
      expect(Object.keys(await es.indices.getAlias({ name: h.goodsIndex }))).toEqual([previous]);
      const [log] = await h.logs.list(1);
      expect(log).toMatchObject({ status: "COMPLETED", details: { error: { code: "ALIAS_SWAP_FAILED", step: "index" } } });
    } finally {
      await es.indices.putSettings({ index: previous!, settings: { "index.blocks.read_only": false } });
    }
  });

  it("an unreachable search engine in step 2 is a warning: COMPLETED, rows stay N, a later cursor run indexes them", async () => {
    const down = unreachableElasticsearch();
    const broken = createBatchHarness({
      knex: db.knex,
      databaseUrl: db.url,
      elasticsearch: es,
      indexCursor: () => cursorIndexer(db.knex, down, h.goodsIndex, pino({ level: "silent" })),
    });
    const result = await broken.batch.run({});
    expect(result).toMatchObject({ success: true, status: "COMPLETED", loadedCount: 4, indexedCount: 0 });
    expect(result.warnings).toEqual([expect.stringMatching(/indexing failed \(BULK_FAILED\).*INDEX_YN='N'/)]);
    expect((await goodsRows(db.knex)).every((r) => r.INDEX_YN === "N")).toBe(true);
    const [log] = await broken.logs.list(1);
    expect(log).toMatchObject({ status: "COMPLETED", details: { error: { code: "BULK_FAILED", step: "index" } } });

    const later = await runGoodsIndexing({
      knex: db.knex, elasticsearch: es, logger: pino({ level: "silent" }), mode: "cursor", index: h.goodsIndex,
      fetchSize: 50_000, bulkSize: 1000, bulkMaxBytes: 1024 * 1024, bulksInFlight: 1,
    });
    expect(later).toMatchObject({ fetchedCount: 3, indexedCount: 3 });
    // G4 (USE_YN='N') is handled as a removal and flipped as well.
    expect((await goodsRows(db.knex)).filter((r) => r.INDEX_YN === "Y").map((r) => r.GOODS_NO)).toEqual(["G1", "G2", "G3", "G4"]);
    await down.close();
  });

  it("an unexpected exception is caught: FAILED log, OperationFailedError, and the next run is served", async () => {
    const buggy = createBatchHarness({
      knex: db.knex,
      databaseUrl: db.url,
      elasticsearch: es,
      indexCursor: () => async () => {
        throw new TypeError("Cannot read properties of undefined (reading 'hits')");
      },
    });
    const err = await rejection(buggy.batch.run({}));
    expect(err.message).not.toMatch(/hits/);
    expect(err.extra).toMatchObject({ status: "FAILED", code: "INTERNAL_ERROR" });
    const [log] = await buggy.logs.list(1);
    expect(log).toMatchObject({ status: "FAILED", details: { error: { code: "INTERNAL_ERROR", step: "batch" } } });
    // the lock was released and the service goes on
    expect((await h.batch.run({})).status).toBe("COMPLETED");
  });
});

describe("step 3", () => {
  it("a log index that refuses the document does not undo the batch: COMPLETED with a warning", async () => {
    // a log index someone created by hand with a clashing mapping
    await es.indices.create({ index: h.logIndex, mappings: { properties: { status: { type: "long" } } } });
    const result = await h.batch.run({});
    expect(result).toMatchObject({ status: "COMPLETED", indexedCount: 3, warnings: ["the batch log could not be saved"] });
    expect((await goodsRows(db.knex)).filter((r) => r.INDEX_YN === "Y")).toHaveLength(4);
  });
});

describe("batch logs", () => {
  it("lists the newest first, limited, and nothing when the log index does not exist", async () => {
    expect(await h.logs.list(20)).toEqual([]);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await h.batch.run({})).batchId);
    expect((await h.logs.list(2)).map((l) => l.batch_id)).toEqual([ids[2], ids[1]]);
    const mapping = await es.indices.getMapping({ index: h.logIndex });
    expect(mapping[h.logIndex]!.mappings.dynamic).toBe("strict");
  });
});

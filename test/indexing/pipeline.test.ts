import { Client } from "@elastic/elasticsearch";
import { Writable } from "node:stream";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { IndexingError } from "../../src/indexing/indexing-error.js";
import { runGoodsIndexing } from "../../src/indexing/modes.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { otherSessions, testRunOptions, deleteGoodsIndices } from "./helpers.js";

const ROWS = 3000;
const es = createTestElasticsearch();
const indices: string[] = [];
let db: TestDatabase;

function latestIndex(): string {
  return indices.at(-1) ?? "";
}

function newIndex(): string {
  const name = uniqueIndexName("goods_pipeline");
  indices.push(name);
  return name;
}

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: ROWS, unusedEvery: 0 });
});

afterAll(async () => {
  await deleteGoodsIndices(es, ...indices);
  await db?.drop();
  await es.close();
});

/** No session of the test database is left reading the goods table or idle inside a transaction. */
async function expectCursorReleased(): Promise<void> {
  const sessions = await otherSessions(db.knex);
  expect(sessions.filter((s) => s.state !== "idle")).toEqual([]);
  expect(sessions.filter((s) => s.state === "idle in transaction" || s.state === "idle in transaction (aborted)")).toEqual([]);
}

describe("pipeline", () => {
  it("holds no more rows than one fetch, the channel capacity, one chunk being pushed and the bulks in flight and being built when the sender is slow", async () => {
    const sizes = { fetchSize: 200, bulkSize: 50, bulksInFlight: 2, channelCapacity: 100 };
    let slowBulks = 0;
    const result = await runGoodsIndexing({
      ...testRunOptions(db.knex, es, newIndex()),
      ...sizes,
      mode: "full",
      onBulkSettled: async () => {
        if (slowBulks++ < 20) await new Promise((resolve) => setTimeout(resolve, 25));
      },
    });

    expect(result).toMatchObject({ fetchedCount: ROWS, indexedCount: ROWS, failedCount: 0 });
    // The reader really waited: the channel filled up, and never beyond its capacity.
    expect(result.maxChannelSize).toBe(sizes.channelCapacity);
    // The reader holds at most one fetch; after it, rows not yet settled in a bulk response are in
    // the chunk waiting to be pushed (at most one bulk), the channel, the bulk being built or the
    // bulks in flight.
    expect(result.maxReaderBuffered).toBeLessThanOrEqual(sizes.fetchSize);
    expect(result.maxRowsHeld).toBeLessThanOrEqual(sizes.channelCapacity + (sizes.bulksInFlight + 2) * sizes.bulkSize);
    const bound = sizes.channelCapacity + sizes.fetchSize + (sizes.bulksInFlight + 2) * sizes.bulkSize;
    expect(result.maxReaderBuffered + result.maxRowsHeld).toBeLessThanOrEqual(bound);
    expect(bound).toBeLessThan(ROWS / 2);
  });

  it("closes the cursor and returns its connection when stopped early by an abort", async () => {
    const controller = new AbortController();
    let fetchedAtStop = 0;
    const error = await runGoodsIndexing({
      ...testRunOptions(db.knex, es, newIndex()),
      mode: "full",
      signal: controller.signal,
      onBulkSettled: (stats) => {
        fetchedAtStop = stats.total;
        if (stats.bulks === 2) controller.abort();
      },
    }).catch((err: unknown) => err);

    expect(error).toBeInstanceOf(Error);
    expect(fetchedAtStop).toBeLessThan(ROWS);
    await expectCursorReleased();
    // The pool is usable: the next run reads everything.
    const next = await runGoodsIndexing({ ...testRunOptions(db.knex, es, newIndex()), mode: "full" });
    expect(next.fetchedCount).toBe(ROWS);
  });

  it("closes the cursor when the bulk sender fails midway", async () => {
    const proxy = await startTcpProxy(elasticsearchUrl());
    const client = new Client({ node: proxy.url, maxRetries: 0 });
    try {
      const error = await runGoodsIndexing({
        ...testRunOptions(db.knex, client, newIndex()),
        mode: "cursor",
        onBulkSettled: (stats) => {
          if (stats.bulks === 2) proxy.severNext();
        },
      }).catch((err: unknown) => err);
      expect((error as IndexingError).code).toBe("BULK_FAILED");
      await expectCursorReleased();
      // Rows of the bulks that settled before the cut stay flipped, each with its document; no other row is.
      const flipped = Number((await db.knex("PR_GOODS_SEARCH_INTF").where({ INDEX_YN: "Y" }).count({ n: "*" }))[0]?.n);
      expect(flipped).toBeGreaterThan(0);
      expect(flipped).toBeLessThan(ROWS);
      const flippedNos = await db.knex("PR_GOODS_SEARCH_INTF").where({ INDEX_YN: "Y" }).pluck("GOODS_NO");
      const { docs } = await es.mget({ index: latestIndex(), ids: flippedNos as string[] });
      expect(docs.every((d) => "found" in d && d.found)).toBe(true);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  it("reports DB_STREAM_ERROR when reading fails, after releasing the connection", async () => {
    // The table is swapped for a view whose 2,500th row raises an error, so the stream fails midway.
    await db.knex.raw(`create or replace function failing_price(n int) returns int language plpgsql as $$
                       begin if n = 2500 then raise exception 'unreadable row'; end if; return n; end $$`);
    await db.knex.raw(`alter table "PR_GOODS_SEARCH_INTF" rename to goods_real`);
    await db.knex.raw(`create view "PR_GOODS_SEARCH_INTF" as
                       select "GOODS_NO", "GOODS_NM", "BRAND_NM", "CATE_CD", "CATE_PATH",
                              failing_price(substr("GOODS_NO", 2)::int) as "SALE_PRICE", "PROMO_PRICE", "ICON_INFO", "IMG_URL",
                              "USE_YN", "INDEX_YN", "SYS_REG_DTM", "SYS_MOD_DTM" from goods_real`);
    try {
      const error = await runGoodsIndexing({ ...testRunOptions(db.knex, es, newIndex()), mode: "full" }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(IndexingError);
      expect((error as IndexingError).code).toBe("DB_STREAM_ERROR");
      await expectCursorReleased();
    } finally {
      await db.knex.raw(`drop view "PR_GOODS_SEARCH_INTF"`);
      await db.knex.raw(`alter table goods_real rename to "PR_GOODS_SEARCH_INTF"`);
    }
  });

  it("logs a progress line with rows read, documents indexed and docs/s at every interval", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const sink = new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
        done();
      },
    });
    await runGoodsIndexing({
      ...testRunOptions(db.knex, es, newIndex()),
      logger: pino({ level: "info" }, sink),
      mode: "full",
      progressIntervalMs: 40,
      onBulkSettled: () => new Promise((resolve) => setTimeout(resolve, 10)),
    });
    const progress = lines.filter((line) => line.msg === "indexing progress");
    // Every line of the run names its job, mode and index.
    expect(progress.every((line) => line.job === "index_goods_full" && line.mode === "full" && line.index === indices.at(-1))).toBe(true);
    expect(lines.some((line) => line.msg === "indexing started" && line.job === "index_goods_full")).toBe(true);
    expect(progress.length).toBeGreaterThanOrEqual(3);
    const last = progress.at(-1) as { rows_read: number; docs_indexed: number; docs_per_s: number };
    expect(last.rows_read).toBeGreaterThan(0);
    expect(last.docs_indexed).toBeGreaterThan(0);
    expect(last.docs_per_s).toBeGreaterThan(0);
    const finished = lines.find((line) => line.msg === "indexing finished");
    expect(finished).toMatchObject({ indexed_count: ROWS, failed_count: 0, removed_count: 0, drift: 0 });
    expect(finished?.docs_per_s).toBeGreaterThan(0);
    expect(finished?.elapsed_ms).toBeGreaterThan(0);
  });
});

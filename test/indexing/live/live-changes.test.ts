import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";
import { commitChange, feedSize, goodsNo, pickKind, waitUntilSearchMatchesTable } from "../../support/live-changes.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { waitFor } from "../../support/wait.js";
import { deleteGoodsIndices } from "../helpers.js";

// Live changes (SPEC.md section 3) through the real server on a real PostgreSQL and
// Elasticsearch: every kind of change is searchable through the alias within seconds, with no
// run requested, and the feed ends empty.

const es = createTestElasticsearch();
const alias = uniqueIndexName("goods_live");
let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 300, unusedEvery: 10 });
  server = await startTestServer({ knex: db.knex, elasticsearch: es, env: { DATABASE_URL: db.url, GOODS_INDEX: alias, INDEX_LIVE: "true" } });
});

afterAll(async () => {
  await server?.close();
  await deleteGoodsIndices(es, alias);
  await db?.drop();
  await es.close();
});

/** Searches (not gets): what a shopper finds, once the index refreshed on its own. */
async function searchable(no: string): Promise<Record<string, unknown> | undefined> {
  const found = await es.search<Record<string, unknown>>({ index: alias, query: { ids: { values: [no] } } });
  return found.hits.hits[0]?._source;
}

async function status() {
  const res = await fetch(`${server.url}/api/search/v1/index/db/goods/status`);
  expect(res.status).toBe(200);
  return (await res.json()) as { live: Record<string, unknown>; drift: number };
}

describe("live changes", () => {
  it("indexes the rows already in the table without any run, and ends with an empty feed", async () => {
    await waitUntilSearchMatchesTable(db.knex, es, alias);
    const { live, drift } = await status();
    expect(drift ?? 0).toBe(0);
    expect(live).toMatchObject({ enabled: true, state: "following", pending_products: 0 });
    expect(Number(live.applied_total)).toBeGreaterThanOrEqual(300);
    expect(Date.parse(live.last_applied_at as string)).toBeGreaterThan(Date.now() - 60_000);
  });

  it("makes an insert, an update, an off-sale, a back-on-sale and a delete searchable within seconds", async () => {
    await db.knex.raw(`insert into "PR_GOODS_SEARCH_INTF" ("GOODS_NO", "GOODS_NM", "SALE_PRICE") values ('LIVE-1', '라이브 신상품', 5000)`);
    await waitFor(async () => (await searchable("LIVE-1"))?.GOODS_NM === "라이브 신상품", "the new product searchable", 5_000, 50);

    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = 4500 where "GOODS_NO" = 'LIVE-1'`);
    await waitFor(async () => (await searchable("LIVE-1"))?.SALE_PRICE === 4500, "the new price searchable", 5_000, 50);

    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "USE_YN" = 'N' where "GOODS_NO" = 'LIVE-1'`);
    await waitFor(async () => (await searchable("LIVE-1")) === undefined, "the product off sale gone from search", 5_000, 50);

    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "USE_YN" = 'Y' where "GOODS_NO" = 'LIVE-1'`);
    await waitFor(async () => (await searchable("LIVE-1")) !== undefined, "the product back on sale searchable", 5_000, 50);

    await db.knex.raw(`delete from "PR_GOODS_SEARCH_INTF" where "GOODS_NO" = 'LIVE-1'`);
    await waitFor(async () => (await searchable("LIVE-1")) === undefined, "the deleted product gone from search", 5_000, 50);

    await waitUntilSearchMatchesTable(db.knex, es, alias);
  });

  it("applies a truncate and a reload of the table", async () => {
    await db.knex.transaction(async (trx) => {
      await trx.raw(`truncate "PR_GOODS_SEARCH_INTF"`);
      await generateGoods(trx, { rows: 120, firstNo: 1000, unusedEvery: 4 });
    });
    await waitUntilSearchMatchesTable(db.knex, es, alias);
    expect(await searchable(goodsNo(1))).toBeUndefined();
    expect(await searchable(goodsNo(1001))).toBeDefined();
  });

  it("does not feed on writes of INDEX_YN alone, whoever makes them", async () => {
    const before = await db.knex.raw(`select sum("INDEX_VERSION")::text as s from "PR_GOODS_SEARCH_INTF"`);
    const { rowCount } = await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "INDEX_YN" = case "INDEX_YN" when 'Y' then 'N' else 'Y' end`);
    expect(rowCount).toBe(120);
    expect(await feedSize(db.knex)).toBe(0);
    const after = await db.knex.raw(`select sum("INDEX_VERSION")::text as s from "PR_GOODS_SEARCH_INTF"`);
    expect(after.rows[0].s).toBe(before.rows[0].s);

    // The indexer's own flips: a cursor run flips every row it indexed, and the feed stays empty.
    const run = await fetch(`${server.url}/api/search/v1/index/db/goods?interval=1`);
    expect(run.status).toBe(200);
    expect(await feedSize(db.knex)).toBe(0);
  });

  it("coalesces many changes of one product into one feed entry", async () => {
    await db.knex.transaction(async (trx) => {
      for (let i = 0; i < 50; i++) await trx.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = ? where "GOODS_NO" = ?`, [1000 + i, goodsNo(1001)]);
      const { rows } = await trx.raw(`select count(*)::int as n from goods_live_feed where goods_no = ?`, [goodsNo(1001)]);
      expect(rows[0].n).toBe(1);
    });
    await waitFor(async () => (await searchable(goodsNo(1001)))?.SALE_PRICE === 1049, "the last price searchable", 5_000, 50);
  });

  it("keeps a product Elasticsearch refuses in the feed with backoff, applies the rest, and applies it once fixed", async () => {
    // A keyword longer than Lucene's 32,766-byte term limit: refused as a document, every time.
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "ICON_INFO" = repeat('X', 40000) where "GOODS_NO" = ?`, [goodsNo(1002)]);
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = 777 where "GOODS_NO" = ?`, [goodsNo(1003)]);
    await waitFor(async () => (await searchable(goodsNo(1003)))?.SALE_PRICE === 777, "the other change applied", 5_000, 50);
    const entry = await db.knex("goods_live_feed").where({ goods_no: goodsNo(1002) }).first();
    expect(entry.attempts).toBeGreaterThanOrEqual(1);
    expect(entry.last_error).toMatch(/^400 /);
    expect(new Date(entry.retry_at).getTime()).toBeGreaterThan(Date.now() - 1_000);
    expect((await status()).live).toMatchObject({ pending_products: 1 });

    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "ICON_INFO" = 'NEW' where "GOODS_NO" = ?`, [goodsNo(1002)]);
    await waitUntilSearchMatchesTable(db.knex, es, alias);
  });

  it("wakes the follower only while it sleeps, and a change that sent no wake-up is applied by the poll", async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const wakeUps: string[] = [];
    listener.on("notification", (message) => wakeUps.push(message.channel));
    try {
      await listener.query("listen goods_live");
      // Idle: the follower listens, and a change wakes it.
      await waitFor(async () => (await db.knex("goods_live_wakeup").first()).listening === true, "the idle follower listening", 5_000, 50);
      await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = 1111 where "GOODS_NO" = ?`, [goodsNo(1001)]);
      await waitFor(async () => wakeUps.length === 1, "one wake-up", 2_000, 20);
      await waitFor(async () => (await searchable(goodsNo(1001)))?.SALE_PRICE === 1111, "the woken change applied", 5_000, 50);

      // Not listening (what a busy follower sets), in the writer's own transaction so that no
      // poll of the follower sets it back in between: no wake-up is sent, the poll still applies it.
      wakeUps.length = 0;
      await db.knex.transaction(async (trx) => {
        await trx("goods_live_wakeup").update({ listening: false });
        await trx.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = 2222 where "GOODS_NO" = ?`, [goodsNo(1001)]);
      });
      await waitFor(async () => (await searchable(goodsNo(1001)))?.SALE_PRICE === 2222, "the change applied by the poll", 5_000, 50);
      expect(wakeUps).toEqual([]);
      await waitFor(async () => (await db.knex("goods_live_wakeup").first()).listening === true, "the follower listening again after its poll", 5_000, 50);
    } finally {
      await listener.end();
    }
  });

  it("keeps search equal to the table under a stream of mixed changes", async () => {
    let next = 5000;
    for (let i = 0; i < 400; i++) {
      const existing = goodsNo(1000 + Math.floor(Math.random() * 120));
      await commitChange(db.knex, pickKind(), existing, goodsNo(next++));
    }
    await waitUntilSearchMatchesTable(db.knex, es, alias);
    // The gauges are the follower's last measurement, taken at most once a second.
    const metrics = () => fetch(`${server.url}/metrics`).then((res) => res.text());
    await waitFor(async () => /^indexing_live_pending_products 0$/m.test(await metrics()), "the pending gauge at 0", 5_000, 100);
    expect(await metrics()).toMatch(/^indexing_live_state\{state="following"\} 1$/m);
    expect(await metrics()).toMatch(/^indexing_live_applied_total [1-9]\d*$/m);
  });
});

import { Client } from "@elastic/elasticsearch";
import pg from "pg";
import { Registry } from "prom-client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import type { LiveFollower, LiveFollowerOptions } from "../../../src/indexing/live/live-follower.js";
import { registerLiveMetrics } from "../../../src/indexing/live/live-metrics.js";
import { LIVE_LOCK_KEY } from "../../../src/indexing/live/live-session.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../../support/elasticsearch.js";
import { goodsNo, waitUntilSearchMatchesTable } from "../../support/live-changes.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTcpProxy, type TcpProxy } from "../../support/tcp-proxy.js";
import { waitFor } from "../../support/wait.js";
import { deleteGoodsIndices, testFollower } from "../helpers.js";

// The follower's loop on a real PostgreSQL and Elasticsearch, where it went round in circles:
// feed entries a writer holds locked were sent again in a tight loop, ahead of everything else;
// and a wake-up that arrived in the pass where its session died made a standby retry the lock
// without waiting, for as long as it stayed standby.

const es = createTestElasticsearch();
const alias = uniqueIndexName("goods_live_loop");
let db: TestDatabase;
const followers: LiveFollower[] = [];
const clients: pg.Client[] = [];
const proxies: TcpProxy[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 100 });
});

afterEach(async () => {
  await Promise.all(followers.splice(0).map((f) => f.stop()));
  await Promise.all(clients.splice(0).map((c) => c.end().catch(() => undefined)));
  await Promise.all(proxies.splice(0).map((p) => p.close()));
});

afterAll(async () => {
  await deleteGoodsIndices(es, alias);
  await db?.drop();
  await es.close();
});

/** A follower whose Elasticsearch client counts the bulk requests it sends. */
function startFollower(options: Partial<LiveFollowerOptions> = {}): { follower: LiveFollower; bulks: () => number } {
  let bulks = 0;
  const counted = new Client({ node: elasticsearchUrl() });
  counted.diagnostic.on("response", (_err, result) => {
    if (result?.meta.request.params.path.endsWith("/_bulk")) bulks++;
  });
  const follower = testFollower(db, counted, alias, options);
  followers.push(follower);
  follower.start();
  return { follower, bulks: () => bulks };
}

async function session(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  clients.push(client);
  return client;
}

async function price(no: string): Promise<unknown> {
  const found = await es.search<Record<string, unknown>>({ index: alias, query: { ids: { values: [no] } } });
  return found.hits.hits[0]?._source?.SALE_PRICE;
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the live follower's loop", () => {
  it("leaves feed entries a writer holds locked until it commits, and applies the changes behind them meanwhile", async () => {
    const first = startFollower();
    await waitUntilSearchMatchesTable(db.knex, es, alias);
    await first.follower.stop();

    // Ten changes wait in the feed, then a writer's open transaction changes them again and holds
    // their entries; one more change commits behind them.
    const held = Array.from({ length: 10 }, (_, i) => goodsNo(i + 1));
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = 1000 where "GOODS_NO" = any(?)`, [held]);
    const writer = await session();
    await writer.query("begin");
    await writer.query(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = 2000 where "GOODS_NO" = any($1)`, [held]);
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = 3000 where "GOODS_NO" = ?`, [goodsNo(51)]);

    // Five products per pass: before, every pass took the five held entries at the head again.
    const { bulks } = startFollower({ batchSize: 5 });
    await waitFor(async () => (await price(goodsNo(51))) === 3000, "the change behind the held entries applied", 10_000, 50);
    const sent = bulks();
    await pause(2_000);
    expect(bulks() - sent).toBeLessThanOrEqual(2);

    await writer.query("commit");
    await waitUntilSearchMatchesTable(db.knex, es, alias);
    expect(await price(held[0] as string)).toBe(2000);
  });

  it("waits between lock attempts as a standby, even when a wake-up arrived in the pass that lost its session", async () => {
    // The follower's own session goes through a proxy that counts the bytes it sends.
    const proxy = await startTcpProxy(db.url);
    proxies.push(proxy);
    const throughProxy = new URL(db.url);
    throughProxy.port = new URL(proxy.url).port;
    const { follower } = startFollower({ standbyRetryMs: 3_000, databaseUrl: throughProxy.toString() });
    await waitUntilSearchMatchesTable(db.knex, es, alias);

    // The next pass blocks on the feed's table while a wake-up arrives and its session is killed.
    const blocker = await session();
    await blocker.query("begin");
    await blocker.query("lock table goods_live_feed in access exclusive mode");
    await waitFor(async () => (await waitingOnLocks()) > 0, "a pass blocked on the feed", 5_000, 20);
    await db.knex.raw(`select pg_notify('goods_live', '')`);
    await pause(500);
    await db.knex.raw(`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = 'indexing-live-follower'`);
    // Another replica takes the lock before the pass ends.
    const other = await session();
    await other.query("select pg_advisory_lock($1::bigint)", [LIVE_LOCK_KEY]);
    await blocker.query("rollback");
    await waitFor(() => follower.lastStatus().state === "standby", "the follower in standby", 5_000, 20);

    // A standby tries once per standbyRetryMs (a query of about 100 bytes); a spinning one
    // sends hundreds of attempts a second.
    const before = proxy.bytesUp;
    await pause(3_000);
    expect(proxy.bytesUp - before).toBeLessThan(2_000);
  });

  it("reports the feed's backlog and its age as a standby, in its metrics, while the lock's holder applies nothing", async () => {
    // The holder of the lock applies nothing: a leader that vanished with its session kept open.
    const leader = await session();
    await leader.query("select pg_advisory_lock($1::bigint)", [LIVE_LOCK_KEY]);
    const { follower } = startFollower({ standbyRetryMs: 200 });
    const registry = new Registry();
    registerLiveMetrics(registry, () => follower);
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = "SALE_PRICE" + 1 where "GOODS_NO" = any(?)`, [[goodsNo(61), goodsNo(62)]]);

    await waitFor(() => follower.lastStatus().oldestPendingAgeMs > 1_000, "the standby to see the oldest change age", 10_000, 100);
    expect(follower.lastStatus()).toMatchObject({ state: "standby", pendingProducts: 2 });
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/^indexing_live_pending_products 2$/m);
    expect(metrics).toMatch(/^indexing_live_oldest_pending_age_seconds [1-9]/m);
    expect(metrics).toMatch(/^indexing_live_state\{state="standby"\} 1$/m);
  });
});

async function waitingOnLocks(): Promise<number> {
  const { rows } = await db.knex.raw(
    `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%goods_live_feed%'`,
  );
  return rows[0].n as number;
}

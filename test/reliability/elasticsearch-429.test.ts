import { Client } from "@elastic/elasticsearch";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods-generator.js";
import { documentCount, flagCounts } from "../indexing/helpers.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { startThrottlingProxy, type ThrottlingProxy } from "../support/throttling-proxy.js";

// Elasticsearch answering 429 for the first bulk requests of a run, for half their documents or
// for the whole request: the service reaches it only through a throttling HTTP proxy. Three
// throttled requests stay within the bulk sender's three retries, so every document must make it.

const ROWS = 5_000;
const ELIGIBLE = ROWS - ROWS / 10;

const es = createTestElasticsearch();
let db: TestDatabase;
let proxy: ThrottlingProxy;
let serverClient: Client;
let server: TestServer;
const indices: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: ROWS, unusedEvery: 10 });
  proxy = await startThrottlingProxy(elasticsearchUrl());
  serverClient = new Client({ node: proxy.url, requestTimeout: 60_000, maxRetries: 2 });
});

afterAll(async () => {
  await server?.close();
  await serverClient?.close();
  await proxy?.close();
  if (indices.length > 0) await es.indices.delete({ index: indices, ignore_unavailable: true });
  await db?.drop();
  await es.close();
});

async function serveIndex(): Promise<string> {
  await server?.close();
  const index = uniqueIndexName("goods_429");
  indices.push(index);
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: serverClient,
    env: { DATABASE_URL: db.url, GOODS_INDEX: index, INDEX_BULK_SIZE: "500", INDEX_FETCH_SIZE: "1000", CRON_ENABLED: "false" },
  });
  return index;
}

async function indexGoods(query: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${server.url}/api/search/v1/index/db/goods${query}`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe("Elasticsearch answering 429", () => {
  it("retries the throttled documents of a full run and loses none", async () => {
    const index = await serveIndex();
    const before = proxy.throttledItems;
    proxy.throttleNext(3);
    const { status, body } = await indexGoods("");

    expect(status).toBe(200);
    expect(proxy.throttledItems - before).toBeGreaterThanOrEqual(250);
    expect(body).toMatchObject({ success: true, mode: "full", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(body.failed_count ?? 0).toBe(0);
    expect(await documentCount(es, index)).toBe(ELIGIBLE);
  });

  it("retries bulk requests answered 429 as a whole and loses none", async () => {
    const index = await serveIndex();
    const before = proxy.throttledItems;
    proxy.throttleNext(3, "request");
    const { status, body } = await indexGoods("");

    expect(status).toBe(200);
    expect(proxy.throttledItems - before).toBeGreaterThanOrEqual(500);
    expect(body).toMatchObject({ success: true, mode: "full", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(body.failed_count ?? 0).toBe(0);
    expect(await documentCount(es, index)).toBe(ELIGIBLE);
  });

  it("flips every row of a throttled cursor run to Y once its retry is accepted", async () => {
    const index = await serveIndex();
    const before = proxy.throttledItems;
    proxy.throttleNext(3);
    const { status, body } = await indexGoods("?interval=1");

    expect(status).toBe(200);
    expect(proxy.throttledItems - before).toBeGreaterThanOrEqual(250);
    expect(body).toMatchObject({ success: true, mode: "cursor", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(body.failed_count ?? 0).toBe(0);
    expect(await flagCounts(db.knex)).toEqual({ Y: ELIGIBLE });
    expect(await documentCount(es, index)).toBe(ELIGIBLE);
  });
});

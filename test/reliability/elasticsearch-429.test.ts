import { Client } from "@elastic/elasticsearch";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { documentCount, flagCounts } from "../indexing/helpers.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import type { TestDatabase } from "../support/postgres.js";
import type { TestServer } from "../support/server.js";
import { startThrottlingProxy, type ThrottlingProxy } from "../support/throttling-proxy.js";
import { createGoodsDatabase, indexGoods, removeGoods, startIndexingServer } from "./helpers.js";

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
  db = await createGoodsDatabase(ROWS);
  proxy = await startThrottlingProxy(elasticsearchUrl());
  serverClient = new Client({ node: proxy.url, requestTimeout: 60_000, maxRetries: 2 });
});

afterAll(async () => {
  await server?.close();
  await serverClient?.close();
  await proxy?.close();
  await removeGoods(es, indices, db);
});

async function serveIndex(): Promise<string> {
  await server?.close();
  const index = uniqueIndexName("goods_429");
  indices.push(index);
  server = await startIndexingServer(db, serverClient, { index, bulkSize: 500, fetchSize: 1000 });
  return index;
}

describe("Elasticsearch answering 429", () => {
  it("retries the throttled documents of a full run and loses none", async () => {
    const index = await serveIndex();
    const before = proxy.throttledItems;
    proxy.throttleNext(3);
    const { status, body } = await indexGoods(server);

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
    const { status, body } = await indexGoods(server);

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
    const { status, body } = await indexGoods(server, "?interval=1");

    expect(status).toBe(200);
    expect(proxy.throttledItems - before).toBeGreaterThanOrEqual(250);
    expect(body).toMatchObject({ success: true, mode: "cursor", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(body.failed_count ?? 0).toBe(0);
    expect(await flagCounts(db.knex)).toEqual({ Y: ELIGIBLE });
    expect(await documentCount(es, index)).toBe(ELIGIBLE);
  });
});

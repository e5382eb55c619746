import { Client } from "@elastic/elasticsearch";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { documentCount, flagCounts, indexSettings } from "../indexing/helpers.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import type { TestDatabase } from "../support/postgres.js";
import type { TestServer } from "../support/server.js";
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.js";
import { createGoodsDatabase, indexGoods, removeGoods, startIndexingServer } from "./helpers.js";

// Elasticsearch cut off mid full-index: the server reaches it only through a loopback TCP proxy
// that the test severs after some bulks have gone through, then restores.

const ROWS = 20_000;
const ELIGIBLE = ROWS - ROWS / 10;

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_cut");
let db: TestDatabase;
let proxy: TcpProxy;
let serverClient: Client;
let server: TestServer;

beforeAll(async () => {
  db = await createGoodsDatabase(ROWS);
  proxy = await startTcpProxy(elasticsearchUrl());
  // As src/main.ts builds it, with the retries it has: a cut must beat them too.
  serverClient = new Client({ node: proxy.url, requestTimeout: 60_000, maxRetries: 2 });
  server = await startIndexingServer(db, serverClient, { index, bulkSize: 500, fetchSize: 2000 });
});

afterAll(async () => {
  await server?.close();
  await serverClient?.close();
  await proxy?.close();
  await removeGoods(es, index, db);
});

describe("Elasticsearch cut mid full-index", () => {
  it("answers 503 BULK_FAILED, the next run deletes the partial index it left, and a rerun indexes every eligible row", async () => {
    const run = indexGoods(server);
    // About four bulks of 500 documents: the run is well under way, far from its end.
    await proxy.whenBytesUp(1_000_000);
    proxy.sever();
    const cut = await run;

    expect(cut.status).toBe(503);
    expect(cut.body).toMatchObject({ code: "BULK_FAILED" });
    expect(cut.body.detail).toMatch(/^BULK_FAILED: bulk request to index 'goods_cut_[0-9a-f]+_\d{14}' failed: Elasticsearch is unreachable$/);
    // Its clean-up could not reach Elasticsearch either: the partial index is left, and no alias points to it.
    const [partial] = Object.keys(await es.indices.get({ index: `${index}_*` }));
    expect(await indexSettings(es, partial!)).toEqual({ refresh: "-1", replicas: "0" });
    expect(await es.indices.existsAlias({ name: index })).toBe(false);

    proxy.restore();
    // The next run of any mode deletes the leftover before it writes.
    const cursor = await indexGoods(server, "?interval=1");
    expect(cursor.status).toBe(200);
    expect(await es.indices.exists({ index: partial! })).toBe(false);
    expect(await indexSettings(es, index)).toEqual({ refresh: "1s", replicas: "1" });
    expect(cursor.body).toMatchObject({ success: true, mode: "cursor", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(await flagCounts(db.knex)).toEqual({ Y: ELIGIBLE });

    const rerun = await indexGoods(server);
    expect(rerun.status).toBe(200);
    expect(rerun.body).toMatchObject({ success: true, mode: "full", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(rerun.body.failed_count ?? 0).toBe(0);
    expect(await documentCount(es, index)).toBe(ELIGIBLE);
    expect(await indexSettings(es, index)).toEqual({ refresh: "1s", replicas: "1" });
  });
});

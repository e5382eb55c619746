import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import type { TestDatabase } from "../support/postgres.js";
import type { TestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";
import { createGoodsDatabase, documentsWritten, indexGoods, removeGoods, startIndexingServer } from "./helpers.js";

// The shutdown sequence of src/main.ts, step by step in process: app.stop() first (cron off, the
// running job aborted at a safe point), while the server still accepts requests until it closes.

const ROWS = 60_000;

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_shutdown");
let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createGoodsDatabase(ROWS);
  server = await startIndexingServer(db, es, { index, bulkSize: 1000, fetchSize: 5000 });
});

afterAll(async () => {
  await server?.close();
  await removeGoods(es, index, db);
});

describe("shutdown of the indexing module", () => {
  it("stops the running full index, deletes its partial index, and refuses to start any job afterwards", async () => {
    const running = indexGoods(server);
    await waitFor(async () => (await documentsWritten(es, index)) > 0, "the first documents to be written");

    await server.app.stop();

    expect(Object.keys(await es.indices.get({ index: `${index}_*`, allow_no_indices: true }))).toEqual([]);
    expect(await es.indices.existsAlias({ name: index })).toBe(false);
    expect(await running).toEqual({ status: 503, body: { detail: "full indexing stopped before it finished: shutting down; run it again" } });
    const late = await indexGoods(server, "?interval=1");
    expect(late).toEqual({ status: 503, body: { detail: "the service is shutting down: indexing job 'index_goods_cursor' was not started" } });
    const batch = await fetch(`${server.url}/api/search/v1/batch/product`, { method: "POST" });
    expect(batch.status).toBe(503);
    // Nothing was flipped: the interrupted run never finalized, the refused ones never read.
    expect(await db.knex("PR_GOODS_SEARCH_INTF").where({ INDEX_YN: "Y" }).count({ n: "*" }).first()).toEqual({ n: "0" });
  });
});

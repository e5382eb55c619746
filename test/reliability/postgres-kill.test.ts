import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { documentCount, flagCounts } from "../indexing/helpers.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import type { TestDatabase } from "../support/postgres.js";
import type { TestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";
import { createGoodsDatabase, indexGoods, removeGoods, startIndexingServer } from "./helpers.js";

// The PostgreSQL backend that streams a cursor run's rows is terminated (pg_terminate_backend)
// while the run is in progress: small fetches and a small channel keep the reader mid-table.

const ROWS = 30_000;
const ELIGIBLE = ROWS - ROWS / 10;

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_pgkill");
let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createGoodsDatabase(ROWS);
  server = await startIndexingServer(db, es, { index, bulkSize: 500, fetchSize: 1000 });
});

afterAll(async () => {
  await server?.close();
  await removeGoods(es, index, db);
});

/** Rows of the running cursor run flipped so far: one statement per settled bulk. */
async function acceptedSoFar(): Promise<number> {
  return (await flagCounts(db.knex)).Y ?? 0;
}

/** The backend running the cursor query over PR_GOODS_SEARCH_INTF, killed; its pid. */
async function terminateStreamingBackend(): Promise<number> {
  const { rows } = await db.knex.raw<{ rows: Array<{ pid: number; terminated: boolean }> }>(
    `select pid, pg_terminate_backend(pid) as terminated
       from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid()
        and query like '%from "PR_GOODS_SEARCH_INTF" g %where g."USE_YN" = ''Y'' and g."INDEX_YN" = ''N''%'`,
  );
  expect(rows).toHaveLength(1);
  expect(rows[0]!.terminated).toBe(true);
  return rows[0]!.pid;
}

describe("PostgreSQL connection killed mid-stream", () => {
  it("answers 503 DB_STREAM_ERROR (the database dropped the reader), marks no row Y that is not indexed, and the next cursor run indexes only the rest", async () => {
    const run = indexGoods(server, "?interval=1");
    await waitFor(async () => (await acceptedSoFar()) > 0, "a first bulk accepted");
    await terminateStreamingBackend();
    const killed = await run;

    expect(killed.status).toBe(503);
    expect(killed.body).toMatchObject({ code: "DB_STREAM_ERROR" });
    expect(killed.body.detail).toBe("DB_STREAM_ERROR: reading rows from the database failed");
    const partial = await documentCount(es, index);
    expect(partial).toBeGreaterThan(0);
    expect(partial).toBeLessThan(ELIGIBLE);
    // The settled bulks' rows are flipped, each with its document; the rest stay 'N'.
    const flipped = (await flagCounts(db.knex)).Y ?? 0;
    expect(flipped).toBeGreaterThan(0);
    expect(flipped).toBeLessThanOrEqual(partial);
    expect(await flagCounts(db.knex)).toEqual({ Y: flipped, N: ELIGIBLE - flipped });

    const next = await indexGoods(server, "?interval=1");
    expect(next.status).toBe(200);
    expect(next.body).toMatchObject({ success: true, mode: "cursor", fetched_count: ELIGIBLE - flipped, indexed_count: ELIGIBLE - flipped });
    expect(await flagCounts(db.knex)).toEqual({ Y: ELIGIBLE });
    expect(await documentCount(es, index)).toBe(ELIGIBLE);
  });
});

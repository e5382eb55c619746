import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deleteGoodsIndices } from "../indexing/helpers.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { captureLogLines } from "../support/log-lines.js";
import { adminDatabaseUrl, type TestDatabase } from "../support/postgres.js";
import type { TestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";
import { createGoodsDatabase, documentsWritten, indexGoods, removeGoods, startIndexingServer } from "./helpers.js";

// The job lock's own PostgreSQL session is terminated while a full index runs (as a network cut
// or a database restart would end it). Without that session another replica could take the lock,
// so the job stops: 503, its partial index deleted (the alias untouched), and the next run completes.
// A job stopped on purpose is no internal error: it is logged at warn, without a stack.

const ROWS = 60_000;
const ELIGIBLE = ROWS - ROWS / 10;

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_lock_lost");
let db: TestDatabase;
let server: TestServer;
const { logger, lines } = captureLogLines();

beforeAll(async () => {
  db = await createGoodsDatabase(ROWS);
  server = await startIndexingServer(db, es, { index, bulkSize: 1000, fetchSize: 5000 }, logger);
});

afterAll(async () => {
  await server?.close();
  await deleteGoodsIndices(es, index);
  await removeGoods(es, [], db);
});

/** Terminates the session holding the job's advisory lock, from outside the service. */
async function terminateLockSession(): Promise<void> {
  const client = new pg.Client({ connectionString: adminDatabaseUrl() });
  await client.connect();
  try {
    const { rows } = await client.query<{ terminated: boolean }>(
      `select pg_terminate_backend(pid) as terminated from pg_stat_activity
        where datname = $1 and application_name like 'indexing-job:%'`,
      [db.name],
    );
    expect(rows).toEqual([{ terminated: true }]);
  } finally {
    await client.end();
  }
}

describe("the job lock's connection lost mid-run", () => {
  it("aborts the job with 503, deletes its partial index, and the next run completes", async () => {
    const run = indexGoods(server);
    await waitFor(async () => (await documentsWritten(es, index)) > 0, "the first documents to be written");
    await terminateLockSession();

    const aborted = await run;
    expect(aborted.status).toBe(503);
    expect(aborted.body.detail).toMatch(/job lock's database connection was lost/);
    expect(Object.keys(await es.indices.get({ index: `${index}_*`, allow_no_indices: true }))).toEqual([]);
    expect(await es.indices.existsAlias({ name: index })).toBe(false);
    expect(lines.filter((line) => (line.level as number) >= 50)).toEqual([]);
    expect(lines.some((line) => line.msg === "indexing stopped before it finished" && line.level === 40)).toBe(true);
    expect(JSON.stringify(lines)).not.toContain("stack");

    const next = await indexGoods(server);
    expect(next.status).toBe(200);
    expect(next.body).toMatchObject({ success: true, indexed_count: ELIGIBLE });
  }, 180_000);
});

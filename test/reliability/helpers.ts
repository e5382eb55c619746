import type { Client } from "@elastic/elasticsearch";
import type { Logger } from "pino";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { deleteGoodsIndices } from "../indexing/helpers.js";

/** A fresh database holding `rows` generated goods, one in ten of them unused. */
export async function createGoodsDatabase(rows: number): Promise<TestDatabase> {
  const db = await createTestDatabase();
  await generateGoods(db.knex, { rows, unusedEvery: 10 });
  return db;
}

/** The real server on `db`, indexing goods into `index` in bulks and fetches of the given sizes; no cron. */
export function startIndexingServer(
  db: TestDatabase,
  elasticsearch: Client,
  options: { index: string; bulkSize: number; fetchSize: number },
  logger?: Logger,
): Promise<TestServer> {
  return startTestServer({
    knex: db.knex,
    elasticsearch,
    logger,
    env: {
      DATABASE_URL: db.url,
      GOODS_INDEX: options.index,
      INDEX_BULK_SIZE: String(options.bulkSize),
      INDEX_FETCH_SIZE: String(options.fetchSize),
      CRON_ENABLED: "false",
    },
  });
}

/** Asks `server` to index the goods over REST; the answer's status and JSON body. */
export async function indexGoods(server: TestServer, query = ""): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${server.url}/api/search/v1/index/db/goods${query}`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/**
 * Deletes the indices and the database, then closes `es`. Called once the server is closed, so no
 * run is left writing; `db` is undefined when the setup failed before creating it.
 */
export async function removeGoods(es: Client, indices: string | string[], db: TestDatabase | undefined): Promise<void> {
  await deleteGoodsIndices(es, ...[indices].flat());
  await db?.drop();
  await es.close();
}

/**
 * Documents Elasticsearch has written to the index so far, refreshed or not: a full run turns
 * refreshes off, so `count` would say 0 until it ends.
 */
export async function documentsWritten(es: Client, index: string): Promise<number> {
  // The alias or concrete index, and the physical indices a rebuild fills before the alias points to them.
  const names = [index, `${index}_*`];
  if (!(await es.indices.exists({ index: names, allow_no_indices: true, ignore_unavailable: true }))) return 0;
  const stats = await es.indices.stats({ index: names, metric: "indexing", allow_no_indices: true, ignore_unavailable: true } as never);
  return stats._all.primaries?.indexing?.index_total ?? 0;
}

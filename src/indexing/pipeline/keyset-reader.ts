import type { Knex } from "knex";
import type pg from "pg";
import type { RowQuery } from "./row-reader.js";

// Reads a query in keyset pages: `key > last key order by key limit pageSize`, one short query
// per page, the connection back in the pool before any row is handed out. Nothing stays open
// between pages, so with a pool of one connection (the embedded PostgreSQL) other requests and
// the finalize of settled bulks take turns with the reader. Pages are separate snapshots: rows
// whose key is already behind the reader are left to the next run, as with any later change.

export interface ReadPagesOptions {
  knex: Knex;
  query: RowQuery;
  /** The column the query returns that orders the rows; unique, and best backed by an index. */
  key: string;
  pageSize: number;
  /** Filled while reading: the most rows the reader ever held (the page handed out). */
  stats?: { maxBuffered: number };
}

export async function* readPages<Row>({ knex, query, key, pageSize, stats }: ReadPagesOptions): AsyncGenerator<readonly Row[]> {
  const bindings = [...(query.bindings ?? [])];
  const column = `q."${key.replaceAll('"', '""')}"`;
  const first = `select * from (${query.sql}) q order by ${column} limit $${bindings.length + 1}`;
  const next = `select * from (${query.sql}) q where ${column} > $${bindings.length + 2} order by ${column} limit $${bindings.length + 1}`;
  let last: unknown;
  for (;;) {
    const rows = await page<Row>(knex, last === undefined ? first : next, last === undefined ? [...bindings, pageSize] : [...bindings, pageSize, last]);
    if (stats) stats.maxBuffered = Math.max(stats.maxBuffered, rows.length);
    if (rows.length > 0) yield rows;
    if (rows.length < pageSize) return;
    last = (rows[rows.length - 1] as Record<string, unknown>)[key];
  }
}

/** One page on a connection taken for that query only. */
async function page<Row>(knex: Knex, sql: string, values: unknown[]): Promise<Row[]> {
  const connection = (await knex.client.acquireConnection()) as pg.PoolClient;
  try {
    const result = await connection.query(sql, values);
    return result.rows as Row[];
  } finally {
    await knex.client.releaseConnection(connection).catch(() => {});
  }
}

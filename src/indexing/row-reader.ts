import type { Knex } from "knex";
import type pg from "pg";
import QueryStream from "pg-query-stream";

// Reads a query through one server-side cursor (pg-query-stream): PostgreSQL sends `fetchSize`
// rows per round trip and the stream buffers at most that many, so memory does not grow with the
// table. Leaving the loop early (break, throw, return) destroys the stream, which closes the
// portal and ends its implicit transaction before the connection goes back to the pool.

export interface RowQuery {
  /** SQL with $1..$n placeholders. */
  readonly sql: string;
  readonly bindings?: readonly unknown[];
}

export interface ReadRowsOptions {
  knex: Knex;
  query: RowQuery;
  fetchSize: number;
}

export async function* readRows<Row>({ knex, query, fetchSize }: ReadRowsOptions): AsyncGenerator<Row> {
  const connection = (await knex.client.acquireConnection()) as pg.PoolClient;
  const stream = new QueryStream(query.sql, [...(query.bindings ?? [])], { batchSize: fetchSize, highWaterMark: fetchSize });
  try {
    connection.query(stream);
    for await (const row of stream) yield row as Row;
  } finally {
    await closeStream(stream);
    await knex.client.releaseConnection(connection).catch(() => {});
  }
}

/** Destroys the stream and waits until its portal is closed (bounded, for a dead connection). */
function closeStream(stream: QueryStream): Promise<void> {
  if (stream.closed) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 5_000);
    stream.once("close", () => {
      clearTimeout(timer);
      resolve();
    });
    stream.destroy();
  });
}

import type { Knex } from "knex";
import type pg from "pg";
import QueryStream from "pg-query-stream";

// Reads a query through one server-side cursor (pg-query-stream): PostgreSQL sends `fetchSize`
// rows per round trip, handed out as one batch of the rows' first column (a query that writes
// bulk items selects one text value per row), so memory does not grow with the table. Leaving
// the loop early (break, throw, return) destroys the stream, which closes the portal and ends its
// implicit transaction before the connection goes back to the pool.

export interface RowQuery {
  /** SQL with $1..$n placeholders. */
  readonly sql: string;
  readonly bindings?: readonly unknown[];
}

export interface ReadRowsOptions {
  knex: Knex;
  query: RowQuery;
  fetchSize: number;
  /** Filled while reading: the most rows the reader ever held (the batch handed out). */
  stats?: { maxBuffered: number };
}

/** Each fetch as one array of the rows' first column (the bulk items the query writes). */
export async function* readLines({ knex, query, fetchSize, stats }: ReadRowsOptions): AsyncGenerator<readonly string[]> {
  const connection = (await knex.client.acquireConnection()) as pg.PoolClient;
  const stream = new FetchStream(query.sql, [...(query.bindings ?? [])], fetchSize);
  const lost = watchConnection(connection);
  try {
    connection.query(stream);
    const batches = stream[Symbol.asyncIterator]();
    for (;;) {
      const result = await lost.guard(batches.next());
      if (result.done) break;
      const rows = result.value as Array<[string]>;
      if (stats) stats.maxBuffered = Math.max(stats.maxBuffered, rows.length);
      const lines = new Array<string>(rows.length);
      for (let i = 0; i < rows.length; i++) lines[i] = (rows[i] as [string])[0];
      yield lines;
    }
  } finally {
    lost.dispose();
    if (!lost.happened) await closeStream(stream);
    await knex.client.releaseConnection(connection).catch(() => {});
  }
}

/**
 * pg-query-stream pushes every row of a fetch into the stream one by one (a promise or two per row
 * for whoever iterates it), and asks for the next fetch as soon as its buffer drops below one
 * fetch, so two fetches sit in memory. Here a fetch is pushed as one batch, and with a buffer mark
 * of zero the next round trip starts only when the consumer asks for the next batch: the reader
 * holds one fetch. (Reading the next fetch while the current one is consumed was measured: no
 * faster on two cores, where the round trip's CPU competes with the rest, and 30 to 50 MB more.)
 */
class FetchStream extends QueryStream {
  constructor(
    sql: string,
    values: unknown[],
    private readonly fetchSize: number,
  ) {
    // Rows as arrays: pg then builds no object with named properties per row.
    super(sql, values, { highWaterMark: 0, rowMode: "array" });
  }

  override _read(): void {
    this.cursor.read(this.fetchSize, (err: Error | undefined, rows: unknown[]) => {
      if (err) return void this.destroy(err);
      if (rows.length > 0) this.push(rows);
      if (rows.length < this.fetchSize) this.push(null);
    });
  }
}

/**
 * Notices when the connection dies (backend terminated, network cut). The stream alone may never
 * say so: on a read error it closes its cursor, and that close waits for a ReadyForQuery that a
 * dead connection never sends, so neither 'error' nor 'close' is emitted and the reader would
 * hang for ever. `guard` races one pending read against that. It deliberately does not race a
 * single long-lived promise: every Promise.race on it would leave a reaction holding the row it
 * settled with, and a million-row run would keep every row in memory.
 */
function watchConnection(connection: pg.PoolClient) {
  let failure: Error | undefined;
  let waiter: ((err: Error) => void) | undefined;
  const onLost = (err?: unknown) => {
    failure ??= err instanceof Error ? err : new Error("the database connection ended");
    waiter?.(failure);
  };
  connection.once("error", onLost).once("end", onLost);
  return {
    get happened() {
      return failure !== undefined;
    },
    guard<T>(pending: Promise<T>): Promise<T> {
      if (failure) {
        // Settled later or never: a late rejection must not become an unhandled one.
        pending.catch(() => {});
        return Promise.reject(failure);
      }
      return new Promise<T>((resolve, reject) => {
        waiter = reject;
        pending.then(
          (value) => {
            waiter = undefined;
            resolve(value);
          },
          (err: unknown) => {
            waiter = undefined;
            reject(err);
          },
        );
      });
    },
    dispose() {
      connection.off("error", onLost).off("end", onLost);
    },
  };
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

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
  /** Filled while reading: the most rows the reader ever held (buffered plus the one handed out). */
  stats?: { maxBuffered: number };
}

export async function* readRows<Row>({ knex, query, fetchSize, stats }: ReadRowsOptions): AsyncGenerator<Row> {
  const connection = (await knex.client.acquireConnection()) as pg.PoolClient;
  const stream = new OneFetchQueryStream(query.sql, [...(query.bindings ?? [])], fetchSize);
  const lost = watchConnection(connection);
  try {
    connection.query(stream);
    const rows = stream[Symbol.asyncIterator]();
    for (;;) {
      const result = await lost.guard(rows.next());
      if (result.done) break;
      if (stats) stats.maxBuffered = Math.max(stats.maxBuffered, stream.readableLength + 1);
      yield result.value as Row;
    }
  } finally {
    lost.dispose();
    if (!lost.happened) await closeStream(stream);
    await knex.client.releaseConnection(connection).catch(() => {});
  }
}

/**
 * pg-query-stream fetches `highWaterMark` rows per round trip and asks for the next fetch as soon
 * as its buffer drops below that, so up to two fetches sit in memory. Here the buffer mark is one
 * row and every round trip asks for `fetchSize` rows: the next fetch starts only once the previous
 * one has been consumed, and the reader never holds more than one fetch.
 */
class OneFetchQueryStream extends QueryStream {
  constructor(
    sql: string,
    values: unknown[],
    private readonly fetchSize: number,
  ) {
    super(sql, values, { highWaterMark: 1 });
  }

  override _read(): void {
    super._read(this.fetchSize);
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

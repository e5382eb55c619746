import type { Knex } from "knex";
import type pg from "pg";
import QueryStream from "pg-query-stream";
import { BulkLines } from "./bulk-lines.js";

// Reads a query that writes bulk items (one text value per row: the item's NDJSON lines) through
// one server-side cursor (pg-query-stream): PostgreSQL sends `fetchSize` rows per round trip,
// written as they arrive into one BulkLines and handed out as one batch, so memory does not grow
// with the table and the rows' strings die young. Leaving
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
  /** Items per batch handed out (a fetch is split into several); default the fetch size. */
  batchItems?: number;
  /** Filled while reading: the most rows the reader ever held (one fetch). */
  stats?: { maxBuffered: number };
}

/** Each fetch as the bytes of its bulk items, in batches of at most `batchItems`. */
export async function* readLines({ knex, query, fetchSize, batchItems = fetchSize, stats }: ReadRowsOptions): AsyncGenerator<BulkLines> {
  const connection = (await knex.client.acquireConnection()) as pg.PoolClient;
  const stream = new FetchStream(query.sql, [...(query.bindings ?? [])], fetchSize, Math.min(fetchSize, batchItems));
  let fetched = 0;
  const lost = watchConnection(connection);
  try {
    connection.query(stream);
    const batches = stream[Symbol.asyncIterator]();
    for (;;) {
      const result = await lost.guard(batches.next());
      if (result.done) break;
      const lines = result.value as BulkLines;
      fetched = lines.startsFetch ? lines.count : fetched + lines.count;
      if (stats) stats.maxBuffered = Math.max(stats.maxBuffered, fetched);
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
 *
 * Each row's text is written into the fetch's bytes as it arrives, through pg's own hook for a
 * query's rows (handleDataRow): the row's string dies at once instead of waiting in an array for
 * the rest of its fetch, so the garbage collector never copies it, whatever the fetch size. The
 * bytes go into batches of `batchItems` (a bulk's worth): buffers of one size, which the allocator
 * reuses, where one buffer per 50,000-row fetch was measured to cost a page fault per 4 KB written.
 */
class FetchStream extends QueryStream {
  private batches: BulkLines[] = [];
  private malformed: Error | undefined;
  private bytesPerBatch = 64 * 1024;

  constructor(
    sql: string,
    values: unknown[],
    private readonly fetchSize: number,
    private readonly batchItems: number,
  ) {
    super(sql, values, { highWaterMark: 0, rowMode: "array" });
    // pg hands the rows to the query it runs (this stream), which passes them on to its cursor.
    (this as unknown as { handleDataRow(message: { fields: unknown[] }): void }).handleDataRow = (message) => this.writeRow(message.fields[0]);
  }

  private writeRow(text: unknown): void {
    if (this.malformed) return;
    let lines = this.batches.at(-1);
    if (lines === undefined || lines.count === this.batchItems) {
      lines = new BulkLines(this.batchItems, this.bytesPerBatch);
      lines.startsFetch = this.batches.length === 0;
      this.batches.push(lines);
    }
    try {
      lines.append(text as string);
    } catch (err) {
      // Thrown here it would escape into pg's message handling: reported when the fetch completes.
      this.malformed = err as Error;
    }
  }

  override _read(): void {
    this.cursor.read(this.fetchSize, (err: Error | undefined) => {
      if (err) return void this.destroy(err);
      if (this.malformed) return void this.destroy(this.malformed);
      const batches = this.batches;
      this.batches = [];
      let count = 0;
      for (const lines of batches) {
        count += lines.count;
        // The next batches start with room for this one's bytes and an eighth more.
        this.bytesPerBatch = Math.max(this.bytesPerBatch, Math.ceil(lines.byteLength * 1.125));
        this.push(lines);
      }
      if (count < this.fetchSize) this.push(null);
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

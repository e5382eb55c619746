import type { Logger } from "pino";
import { emptyBulkStats, sendBulks, type BulkItem, type BulkSenderOptions, type BulkStats } from "./bulk-sender.js";
import { createChannel } from "./channel.js";
import { isDatabaseUnavailable } from "../../db/database-errors.js";
import { IndexingError } from "../indexing-error.js";

// The one indexing pipeline, generic over rows and documents: a reader (any async iterable of
// row batches, e.g. the fetches of a server-side cursor) and a bulk sender run concurrently, joined by a
// bounded channel. Rows cross it in chunks of at most one bulk. Modes and the batch only choose
// the rows, the mapping to documents, the index and the sizes.

export interface PipelineOptions<Row, Meta> {
  /** Batches of rows, e.g. one per round trip of the cursor. */
  source: AsyncIterable<readonly Row[]>;
  toItem: (row: Row) => BulkItem<Meta>;
  channelCapacity: number;
  sender: Omit<BulkSenderOptions<Meta>, "signal" | "stats">;
  logger: Logger;
  /** Period of the progress log line. */
  progressIntervalMs: number;
  signal?: AbortSignal;
}

export interface PipelineResult {
  /** Rows taken from the reader. */
  readonly fetched: number;
  readonly stats: BulkStats;
  /** Most items ever queued in the channel. */
  readonly maxChannelSize: number;
  /** Most rows ever between the reader and a settled bulk (channel, bulk being built, bulks in flight). */
  readonly maxRowsHeld: number;
}

export async function runPipeline<Row, Meta>(options: PipelineOptions<Row, Meta>): Promise<PipelineResult> {
  const { source, toItem, channelCapacity, logger, signal } = options;
  const channel = createChannel<BulkItem<Meta>>(channelCapacity);
  const stats = emptyBulkStats();
  const counters = { fetched: 0, maxRowsHeld: 0 };
  const onAbort = () => channel.cancel(new Error("indexing aborted"));
  signal?.addEventListener("abort", onAbort, { once: true });
  const progress = startProgressLog(logger, options.progressIntervalMs, counters, stats);

  const chunkSize = Math.max(1, Math.min(channelCapacity, options.sender.bulkSize));
  const producer = produce(source, toItem, chunkSize, channel, counters, stats);
  let consumerError: unknown;
  try {
    await sendBulks(channel, { ...options.sender, signal, stats });
  } catch (err) {
    consumerError = err;
  } finally {
    // Whatever stopped the consumer also stops the reader: its pending push rejects, its loop
    // exits and the reader's finally closes the cursor and returns the connection.
    channel.cancel(new Error("bulk sender stopped"));
    clearInterval(progress);
    signal?.removeEventListener("abort", onAbort);
  }
  const producerError = await producer;
  if (producerError !== undefined) throw producerError;
  if (consumerError !== undefined) throw consumerError;
  if (signal?.aborted) throw new Error("indexing aborted before it finished");
  return { fetched: counters.fetched, stats, maxChannelSize: channel.maxSize, maxRowsHeld: counters.maxRowsHeld };
}

/** Feeds the channel; resolves to the reader's error (as DB_STREAM_ERROR), or undefined. */
async function produce<Row, Meta>(
  source: AsyncIterable<readonly Row[]>,
  toItem: (row: Row) => BulkItem<Meta>,
  chunkSize: number,
  channel: ReturnType<typeof createChannel<BulkItem<Meta>>>,
  counters: { fetched: number; maxRowsHeld: number },
  stats: BulkStats,
): Promise<unknown> {
  let stage: "reading" | "mapping" | "pushing" = "reading";
  try {
    for await (const rows of source) {
      for (let start = 0; start < rows.length; start += chunkSize) {
        stage = "mapping";
        const chunk: BulkItem<Meta>[] = [];
        for (let i = start; i < Math.min(start + chunkSize, rows.length); i++) chunk.push(toItem(rows[i] as Row));
        counters.fetched += chunk.length;
        counters.maxRowsHeld = Math.max(counters.maxRowsHeld, counters.fetched - stats.successful - stats.failed);
        stage = "pushing";
        await channel.push(chunk);
      }
      stage = "reading";
    }
    channel.close();
    return undefined;
  } catch (err) {
    // A rejected push means the consumer stopped first; its error is the one to report.
    if (stage === "pushing") return undefined;
    // A mapper that throws is a bug in the mapping, not a database failure: the run fails with it.
    // A reader dropped by the database (terminated, restarted, unreachable) is a dependency that is
    // down, 503 like every other; a query the database refused stays a failure of the run.
    const error =
      stage === "mapping"
        ? toError(err)
        : new IndexingError("DB_STREAM_ERROR", "reading rows from the database failed", { cause: err, unavailable: isDatabaseUnavailable(err) });
    channel.cancel(error);
    return error;
  }
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

function startProgressLog(logger: Logger, intervalMs: number, counters: { fetched: number }, stats: BulkStats): NodeJS.Timeout {
  const startedAt = Date.now();
  const timer = setInterval(() => {
    const seconds = (Date.now() - startedAt) / 1000;
    logger.info(
      { rows_read: counters.fetched, docs_indexed: stats.successful, docs_failed: stats.failed, docs_per_s: Math.round(stats.successful / seconds) },
      "indexing progress",
    );
  }, intervalMs);
  timer.unref();
  return timer;
}

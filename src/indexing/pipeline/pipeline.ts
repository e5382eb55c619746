import type { Logger } from "pino";
import { emptyBulkStats, sendBulks, type BulkSenderOptions, type BulkStats } from "./bulk-sender.js";
import { MalformedItemError, type BulkLines } from "./bulk-lines.js";
import { createChannel, type Channel } from "./channel.js";
import { isDatabaseUnavailable } from "../../db/database-errors.js";
import { IndexingError } from "../indexing-error.js";

// The one indexing pipeline, generic over bulk items: a reader (any async iterable of batches of
// items as bytes, e.g. the fetches of a server-side cursor whose query writes them) and a bulk
// sender run concurrently, joined by a bounded channel. Items cross it as bytes, in chunks of at
// most one bulk: nothing is mapped or parsed per item on the way. Modes and the batch only choose
// the query, the index and the sizes.

export interface PipelineOptions {
  /** Batches of items, e.g. one per round trip of the cursor. */
  source: AsyncIterable<BulkLines>;
  channelCapacity: number;
  sender: Omit<BulkSenderOptions, "signal" | "stats">;
  logger: Logger;
  /** Period of the progress log line. */
  progressIntervalMs: number;
  signal?: AbortSignal;
}

export interface PipelineResult {
  /** Items taken from the reader. */
  readonly fetched: number;
  readonly stats: BulkStats;
  /** Most items ever queued in the channel. */
  readonly maxChannelSize: number;
  /** Most items ever between the reader and a settled bulk (channel, bulk being built, bulks in flight). */
  readonly maxRowsHeld: number;
}

export async function runPipeline(options: PipelineOptions): Promise<PipelineResult> {
  const { source, channelCapacity, logger, signal } = options;
  const channel = createChannel<BulkLines>(channelCapacity);
  const stats = emptyBulkStats();
  const counters = { fetched: 0, maxRowsHeld: 0 };
  const onAbort = () => channel.cancel(new Error("indexing aborted"));
  signal?.addEventListener("abort", onAbort, { once: true });
  const progress = startProgressLog(logger, options.progressIntervalMs, counters, stats);

  const chunkSize = Math.max(1, Math.min(channelCapacity, options.sender.bulkSize));
  const producer = produce(source, chunkSize, channel, counters, stats);
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
async function produce(
  source: AsyncIterable<BulkLines>,
  chunkSize: number,
  channel: Channel<BulkLines>,
  counters: { fetched: number; maxRowsHeld: number },
  stats: BulkStats,
): Promise<unknown> {
  let stage: "reading" | "pushing" = "reading";
  try {
    for await (const items of source) {
      for (let start = 0; start < items.length; start += chunkSize) {
        const chunk = items.length <= chunkSize ? items : items.slice(start, Math.min(start + chunkSize, items.length));
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
    // An item that is not bulk lines is a bug in the query that wrote it: the run fails with it.
    // A reader dropped by the database (terminated, restarted, unreachable) is a dependency that is
    // down, 503 like every other; a query the database refused stays a failure of the run.
    const error = err instanceof MalformedItemError ? err : new IndexingError("DB_STREAM_ERROR", "reading rows from the database failed", { cause: err, unavailable: isDatabaseUnavailable(err) });
    channel.cancel(error);
    return error;
  }
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

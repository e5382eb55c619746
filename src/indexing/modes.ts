import { randomUUID } from "node:crypto";
import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import { AcceptedKeysStore } from "./accepted-keys-store.js";
import { isUnreachable, type BulkStats } from "./pipeline/bulk-sender.js";
import { ensureGoodsIndex, optimizeForBulk, restoreAfterBulk, restoreIfLeftOptimized } from "./goods-index.js";
import { goodsItem, goodsQuery, type GoodsKey, type GoodsRow, type IndexingMode } from "./goods-rows.js";
import { IndexingError, messageOf } from "./indexing-error.js";
import type { IndexingMetrics } from "./indexing-metrics.js";
import { runPipeline, type PipelineResult } from "./pipeline/pipeline.js";
import { readRows } from "./pipeline/row-reader.js";

// The indexing modes over the one pipeline, without any lock: callers (the IndexGoods RPC, the
// batch, the cron runner) take the job lock around it.

export interface GoodsIndexingOptions {
  knex: Knex;
  elasticsearch: Client;
  logger: Logger;
  mode: IndexingMode;
  /** Incremental mode only: the SYS_MOD_DTM window in minutes. */
  intervalMinutes?: number;
  index: string;
  /** Rows per round trip of the server-side cursor. */
  fetchSize: number;
  /** Documents per bulk request. */
  bulkSize: number;
  /** Bytes per bulk request, whatever the document count. */
  bulkMaxBytes: number;
  bulksInFlight: number;
  /** Items the channel holds; default 2 x bulkSize. */
  channelCapacity?: number;
  progressIntervalMs?: number;
  signal?: AbortSignal;
  /** Called after every settled bulk; lets tests act between bulks deterministically. */
  onBulkSettled?: (stats: Readonly<BulkStats>) => Promise<void> | void;
  metrics?: Pick<IndexingMetrics, "runSucceeded" | "runFailed">;
}

export interface IndexingResult {
  mode: IndexingMode;
  fetchedCount: number;
  indexedCount: number;
  failedCount: number;
  elapsedMs: number;
  /** Cursor mode: rows flipped to INDEX_YN='Y' (rows changed meanwhile are not). */
  finalizedCount?: number;
  /** Bound checks: most rows held by the reader, most items in the channel, most rows between reader and settled bulks. */
  maxReaderBuffered: number;
  maxChannelSize: number;
  maxRowsHeld: number;
}

export async function runGoodsIndexing(options: GoodsIndexingOptions): Promise<IndexingResult> {
  try {
    const result = await indexOnce(options);
    options.metrics?.runSucceeded(result);
    return result;
  } catch (err) {
    options.metrics?.runFailed(options.mode, err instanceof IndexingError ? err.code : "error");
    throw err;
  }
}

async function indexOnce(options: GoodsIndexingOptions): Promise<IndexingResult> {
  const { elasticsearch, index, mode, logger } = options;
  const startedAt = performance.now();
  await ensureGoodsIndex(elasticsearch, index);
  if (mode === "full") await optimizeForBulk(elasticsearch, index);
  else await healLeftoverSettings(options);
  const reader = { maxBuffered: 0 };
  let outcome: { pipeline: PipelineResult; finalizedCount?: number } | undefined;
  try {
    outcome = mode === "cursor" ? await runCursor(options, reader) : { pipeline: await runSelection(options, reader, undefined) };
  } finally {
    await settleIndex(options, outcome !== undefined);
  }
  const { pipeline, finalizedCount } = outcome;
  const result: IndexingResult = {
    mode,
    fetchedCount: pipeline.fetched,
    indexedCount: pipeline.stats.successful,
    failedCount: pipeline.stats.failed,
    elapsedMs: Math.round(performance.now() - startedAt),
    finalizedCount,
    maxReaderBuffered: reader.maxBuffered,
    maxChannelSize: pipeline.maxChannelSize,
    maxRowsHeld: pipeline.maxRowsHeld,
  };
  logger.info({ index, ...result }, "indexing finished");
  return result;
}

/** Reads the mode's rows and sends them; accepted keys go to `onAccepted`. */
function runSelection(
  options: GoodsIndexingOptions,
  readerStats: { maxBuffered: number },
  onAccepted: ((keys: GoodsKey[]) => Promise<void>) | undefined,
) {
  const { knex, elasticsearch, logger, mode, index, bulkSize } = options;
  let dropsLogged = 0;
  return runPipeline<GoodsRow, GoodsKey>({
    source: readRows<GoodsRow>({ knex, query: goodsQuery(mode, options.intervalMinutes), fetchSize: options.fetchSize, stats: readerStats }),
    toItem: goodsItem,
    channelCapacity: options.channelCapacity ?? 2 * bulkSize,
    logger,
    progressIntervalMs: options.progressIntervalMs ?? 10_000,
    signal: options.signal,
    sender: {
      client: elasticsearch,
      index,
      bulkSize,
      maxBytes: options.bulkMaxBytes,
      concurrency: options.bulksInFlight,
      onAccepted,
      onBulkSettled: options.onBulkSettled,
      onDrop: (item, failure) => {
        // Every drop is counted in the result; the first ones are logged with their reason.
        if (dropsLogged++ < 20) logger.warn({ goods_no: item.id, index, ...failure }, "document rejected by Elasticsearch");
      },
    },
  });
}

/**
 * Cursor mode: accepted keys are recorded as bulk responses arrive, then one statement flips
 * exactly those rows. With a single-connection pool (embedded PostgreSQL) the reader holds the
 * only connection, so keys wait in memory until the stream has ended.
 */
async function runCursor(
  options: GoodsIndexingOptions,
  readerStats: { maxBuffered: number },
): Promise<{ pipeline: PipelineResult; finalizedCount: number }> {
  const store = AcceptedKeysStore.create({ knex: options.knex });
  const runId = randomUUID();
  const deferred: GoodsKey[] | undefined = poolMax(options.knex) <= 1 ? [] : undefined;
  await finalizeStep(() => store.clear(), "clearing accepted keys of earlier runs failed");
  const record = async (keys: GoodsKey[]) => {
    if (deferred) deferred.push(...keys);
    else await finalizeStep(() => store.record(runId, keys), "recording accepted rows failed");
  };
  try {
    const pipeline = await runSelection(options, readerStats, record);
    if (deferred) await finalizeStep(() => store.record(runId, deferred), "recording accepted rows failed");
    const finalizedCount = await finalizeStep(() => store.finalize(runId), "flipping INDEX_YN to 'Y' failed");
    return { pipeline, finalizedCount };
  } finally {
    await store.clear(runId).catch((err: unknown) => options.logger.warn({ err: messageOf(err) }, "clearing accepted keys failed"));
  }
}

async function finalizeStep<T>(step: () => Promise<T>, message: string): Promise<T> {
  try {
    return await step();
  } catch (err) {
    if (err instanceof IndexingError) throw err;
    throw new IndexingError("FINALIZE_FAILED", message, { cause: err });
  }
}

/**
 * After every run: full mode restores refresh 1s / replicas 1 whether or not it failed; other
 * modes refresh so that the run's documents are searchable at once. A failed restore after a
 * successful run fails the run (OPTIMIZE_FAILED): an index left unrefreshed must not go unnoticed.
 */
async function settleIndex(options: GoodsIndexingOptions, succeeded: boolean): Promise<void> {
  const { elasticsearch, index, logger, mode } = options;
  try {
    if (mode === "full") await restoreAfterBulk(elasticsearch, index);
    else await elasticsearch.indices.refresh({ index });
  } catch (err) {
    logger.error({ err: messageOf(err), index, mode }, "restoring index settings failed");
    if (succeeded && mode === "full") {
      throw new IndexingError("OPTIMIZE_FAILED", `restoring refresh_interval 1s and replicas 1 on '${index}' failed`, { cause: err });
    }
  }
}

/** A full run that died or failed to restore must not leave the index unrefreshed for good. */
async function healLeftoverSettings({ elasticsearch, index, logger }: GoodsIndexingOptions): Promise<void> {
  try {
    if (await restoreIfLeftOptimized(elasticsearch, index)) logger.warn({ index }, "restored refresh 1s / replicas 1 left behind by an earlier full run");
  } catch (err) {
    throw new IndexingError("OPTIMIZE_FAILED", `restoring refresh_interval 1s and replicas 1 on '${index}' failed`, {
      cause: err,
      unavailable: isUnreachable(err),
    });
  }
}

function poolMax(knex: Knex): number {
  const config = knex.client.config as { pool?: { max?: number } };
  return config.pool?.max ?? 10;
}

import type { Client } from "@elastic/elasticsearch";
import { ACTOR_UNKNOWN } from "../actor.js";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { GoodsAnalyzer } from "../config.js";
import { isDatabaseUnavailable } from "../db/database-errors.js";
import { clearDeletedBefore, finalizeRebuilt, finalizeSettled } from "./goods/goods-finalize.js";
import { whileNoBuildWrite } from "./goods/build-lock.js";
import {
  createBuildIndex,
  deleteIndex,
  deleteLeftoverBuilds,
  ensureGoodsAlias,
  restoreBuildIndex,
  swapAlias,
} from "./goods/goods-index.js";
import { goodsQuery, removalQuery, type IndexingMode } from "./goods/goods-rows.js";
import { removedSinceRead } from "./goods/removed-since-read.js";
import { databaseNow, recordRun } from "./goods/index-runs.js";
import { endLeftoverPause, pauseRefreshWhenLarge } from "./goods/refresh-pause.js";
import { measureDrift } from "./goods/index-status.js";
import { messageOf } from "../errors.js";
import { errorCodeOf, IndexingError, isDependencyDown } from "./indexing-error.js";
import type { IndexingMetrics } from "./indexing-metrics.js";
import { toBulkLines } from "./pipeline/bulk-lines.js";
import { sendBulks, type BulkAction, type BulkStats } from "./pipeline/bulk-sender.js";
import { runPipeline, type PipelineResult } from "./pipeline/pipeline.js";
import { readLines, type RowQuery } from "./pipeline/row-reader.js";

// The indexing modes over the one pipeline, without any lock: callers (the IndexGoods RPC, the
// batch, the cron runner) take the job lock around it. Full mode, and cursor mode when the batch
// asks for a rebuild, fill a new physical index and move the alias; the others write through it.

export interface GoodsIndexingOptions {
  knex: Knex;
  elasticsearch: Client;
  logger: Logger;
  mode: IndexingMode;
  /** Incremental mode only: the SYS_MOD_DTM window in minutes. */
  intervalMinutes?: number;
  /** Cursor mode: build a new physical index and move the alias (the batch's full load). */
  rebuild?: boolean;
  /** The job name in logs; default index_goods_<mode>. */
  job?: string;
  /** Who started the run, recorded with it (src/actor.ts); default unknown. */
  actor?: string;
  /** The alias searches use (GOODS_INDEX). */
  index: string;
  analyzer?: GoodsAnalyzer;
  /** Rows per round trip of the server-side cursor. */
  fetchSize: number;
  /** Documents per bulk request. */
  bulkSize: number;
  /** Bytes per bulk request, whatever the document count. */
  bulkMaxBytes: number;
  bulksInFlight: number;
  /** Cursor and incremental: documents sent before the index's refreshes pause until the run ends (refresh-pause.ts). */
  pauseRefreshAfterDocs?: number;
  /** Items the channel holds; default 2 x bulkSize. */
  channelCapacity?: number;
  progressIntervalMs?: number;
  signal?: AbortSignal;
  /** Called after every settled bulk; lets tests act between bulks deterministically. */
  onBulkSettled?: (stats: Readonly<BulkStats>) => Promise<void> | void;
  metrics?: Pick<IndexingMetrics, "runSucceeded" | "runFailed" | "driftMeasured">;
}

export interface IndexingResult {
  mode: IndexingMode;
  fetchedCount: number;
  indexedCount: number;
  failedCount: number;
  /** Documents removed because their product left the index (a delete answered 404 is not counted). */
  removedCount: number;
  elapsedMs: number;
  /** Cursor mode: rows flipped to INDEX_YN='Y' (rows changed meanwhile are not). */
  finalizedCount?: number;
  /** eligible rows - documents, measured at the end of the run; undefined when it could not be measured. */
  drift?: number;
  /** Bound checks: most rows held by the reader, most items in the channel, most rows between reader and settled bulks. */
  maxReaderBuffered: number;
  maxChannelSize: number;
  maxRowsHeld: number;
}

interface Run {
  options: GoodsIndexingOptions;
  logger: Logger;
  /** The index the pass writes: the alias, or the physical index being built. */
  target: string;
  reader: { maxBuffered: number };
  finalized: { count: number };
  /** Cursor mode through the alias: flip INDEX_YN as each bulk settles. */
  flip: boolean;
  /** GOODS_NO of documents Elasticsearch rejected (few: each is logged). */
  rejected: Set<string>;
  /**
   * Through the alias: products the index pass wrote that are gone since its snapshot, deleted
   * again as each bulk settles (removed-since-read.ts); undefined for a rebuild.
   */
  removedAgain?: { count: number };
}

export async function runGoodsIndexing(options: GoodsIndexingOptions): Promise<IndexingResult> {
  const { mode, index, knex } = options;
  const job = options.job ?? `index_goods_${mode}`;
  const logger = options.logger.child({ job, mode, index });
  const started = performance.now();
  const startedAt = await databaseNow(knex).catch(() => new Date());
  logger.info({ rebuild: rebuilds(options) }, "indexing started");
  try {
    const result = await indexOnce(options, logger, startedAt, started);
    options.metrics?.runSucceeded(result);
    await record(options, logger, { success: result.failedCount === 0, startedAt, result });
    const docsPerS = result.elapsedMs > 0 ? Math.round((result.indexedCount * 1000) / result.elapsedMs) : 0;
    logger.info(
      {
        fetched_count: result.fetchedCount,
        indexed_count: result.indexedCount,
        failed_count: result.failedCount,
        removed_count: result.removedCount,
        finalized_count: result.finalizedCount,
        elapsed_ms: result.elapsedMs,
        docs_per_s: docsPerS,
        drift: result.drift,
      },
      "indexing finished",
    );
    logger.debug(
      { max_reader_buffered: result.maxReaderBuffered, max_channel_size: result.maxChannelSize, max_rows_held: result.maxRowsHeld },
      "indexing pipeline high-water marks",
    );
    return result;
  } catch (err) {
    const code = errorCodeOf(err);
    options.metrics?.runFailed(mode, code);
    const elapsed = Math.round(performance.now() - started);
    // A job stopped on purpose (shutdown, its lock lost) and a dependency that is down are
    // expected now and then: one warn line, no stack trace.
    if (options.signal?.aborted) {
      logger.warn({ code, reason: messageOf(options.signal.reason), elapsed_ms: elapsed }, "indexing stopped before it finished");
    } else if (isDependencyDown(err)) {
      logger.warn({ code, reason: messageOf(err), elapsed_ms: elapsed }, "indexing failed: a dependency is unavailable");
    } else logger.error({ err, code, elapsed_ms: elapsed }, "indexing failed");
    await record(options, logger, { success: false, startedAt });
    throw err;
  }
}

function rebuilds(options: GoodsIndexingOptions): boolean {
  return options.mode === "full" || (options.mode === "cursor" && options.rebuild === true);
}

async function indexOnce(options: GoodsIndexingOptions, logger: Logger, startedAt: Date, started: number): Promise<IndexingResult> {
  const { elasticsearch: client, index } = options;
  const reader = { maxBuffered: 0 };
  const finalized = { count: 0 };
  // Under the job lock no build is in progress: any unaliased build index is a dead run's leftover.
  const leftovers = await whileNoBuildWrite(options.knex, index, () => deleteLeftoverBuilds(client, index));
  if (leftovers.length > 0) logger.warn({ deleted: leftovers }, "deleted partial indices left by an earlier run");
  if (await endLeftoverPause(client, index)) logger.warn("an earlier run died with refreshes paused: live refresh restored");
  let removal: PipelineResult | undefined;
  const removedAgain = { count: 0 };
  let pipeline: PipelineResult;
  if (rebuilds(options)) {
    pipeline = await rebuild(options, logger, { reader, finalized }, startedAt);
  } else {
    await ensureGoodsAlias(client, index, options.analyzer ?? "cjk", logger);
    const run: Run = { options, logger, target: index, reader, finalized, flip: options.mode === "cursor", rejected: new Set(), removedAgain };
    removal = await removalPass(run);
    const pause = pauseRefreshWhenLarge(client, index, logger, options.pauseRefreshAfterDocs);
    try {
      pipeline = await indexPass(run, (stats) => pause.onBulkSettled(stats.total));
    } finally {
      // A restore that fails is left to the next run, which lifts the pause before it writes.
      await pause.end().catch((err: unknown) => logger.warn({ err: messageOf(err) }, "restoring refresh 1s after a large run failed"));
    }
    await refresh(client, index);
  }
  const result: IndexingResult = {
    mode: options.mode,
    fetchedCount: pipeline.fetched,
    indexedCount: pipeline.stats.successful,
    failedCount: pipeline.stats.failed,
    removedCount: removal ? removal.stats.successful - removal.stats.missing + removedAgain.count : 0,
    elapsedMs: 0,
    finalizedCount: options.mode === "cursor" ? finalized.count : undefined,
    maxReaderBuffered: reader.maxBuffered,
    maxChannelSize: pipeline.maxChannelSize,
    maxRowsHeld: pipeline.maxRowsHeld,
  };
  result.drift = await drift(options, logger);
  result.elapsedMs = Math.round(performance.now() - started);
  return result;
}

/**
 * Fills a new physical index and moves the alias to it; a failure deletes the partial index.
 * Products that left are removed by being left out. A rebuild cannot resume (its partial index
 * is deleted), so the batch's cursor rebuild flips its rows in one statement once live.
 */
async function rebuild(
  options: GoodsIndexingOptions,
  logger: Logger,
  counters: Pick<Run, "reader" | "finalized">,
  startedAt: Date,
): Promise<PipelineResult> {
  const { elasticsearch: client, index } = options;
  const build = await createBuildIndex(client, index, options.analyzer ?? "cjk", logger);
  const run: Run = { options, logger, target: build, ...counters, flip: false, rejected: new Set() };
  let live = false;
  let pipeline: PipelineResult;
  try {
    pipeline = await indexPass(run);
    await restoreBuildIndex(client, build);
    // Going live removes the building alias: not while the live follower writes through it.
    await whileNoBuildWrite(options.knex, index, () => swapAlias(client, index, build));
    live = true;
    logger.info({ physical_index: build }, "alias moved to the new index");
  } finally {
    if (!live) {
      await whileNoBuildWrite(options.knex, index, () => deleteIndex(client, build)).catch((err: unknown) =>
        logger.warn({ err: messageOf(err), physical_index: build }, "deleting the partial index failed; the next run deletes it"),
      );
    }
  }
  if (options.mode === "cursor") run.finalized.count = await finalizeRebuilt(options.knex, startedAt, [...run.rejected]);
  await clearDeletedBefore(options.knex, startedAt);
  return pipeline;
}

/** The mode's eligible rows into the target; cursor mode flips them as bulks settle. */
function indexPass(run: Run, onBulkSettled?: BulkSettled): Promise<PipelineResult> {
  const { mode, intervalMinutes } = run.options;
  return pass(run, goodsQuery(mode, intervalMinutes), { settles: run.flip, removesAgain: run.removedAgain !== undefined, onBulkSettled });
}

/** Deletes the documents of products that left the index (none in a full run). */
function removalPass(run: Run): Promise<PipelineResult> {
  const { mode, intervalMinutes } = run.options;
  return pass(run, removalQuery(mode === "incremental" ? "incremental" : "cursor", intervalMinutes), { settles: true });
}

type BulkSettled = (stats: Readonly<BulkStats>) => Promise<void> | void;

interface PassOptions {
  /** The accepted items are finalized (flipped, tombstones cleared) as each bulk settles. */
  settles: boolean;
  /** Products accepted and gone since the snapshot are deleted again as each bulk settles. */
  removesAgain?: boolean;
  onBulkSettled?: BulkSettled;
}

async function pass(run: Run, query: RowQuery, { settles, removesAgain, onBulkSettled }: PassOptions): Promise<PipelineResult> {
  const { options, logger, target } = run;
  const { knex, elasticsearch, bulkSize } = options;
  const { flip } = run;
  const settle = async (actions: BulkAction[]) => {
    // Read the count after the await: two bulks in flight settle concurrently.
    const flipped = await finalizeSettled(knex, actions, { flip });
    run.finalized.count += flipped;
  };
  let dropsLogged = 0;
  const result = await runPipeline({
    source: readLines({ knex, query, fetchSize: options.fetchSize, batchItems: bulkSize, stats: run.reader }),
    channelCapacity: options.channelCapacity ?? 2 * bulkSize,
    logger,
    progressIntervalMs: options.progressIntervalMs ?? 10_000,
    signal: options.signal,
    sender: {
      client: elasticsearch,
      index: target,
      bulkSize,
      maxBytes: options.bulkMaxBytes,
      concurrency: options.bulksInFlight,
      onAccepted:
        settles || removesAgain
          ? async (actions) => {
              if (settles) await settle(actions);
              if (removesAgain) await removeAgain(run, actions);
            }
          : undefined,
      onBulkSettled: async (stats) => {
        await onBulkSettled?.(stats);
        await options.onBulkSettled?.(stats);
      },
      onDrop: (action, failure) => {
        run.rejected.add(action.id);
        // Every drop is counted in the result; the first ones are logged with their reason.
        if (dropsLogged++ < 20) logger.warn({ goods_no: action.id, physical_index: target, ...failure }, "document rejected by Elasticsearch");
      },
    },
  });
  return result;
}

/**
 * Deletes again the accepted products that are no longer for sale by a change newer than the
 * state written: the live follower deleted them already, and Elasticsearch may have forgotten it.
 */
async function removeAgain(run: Run, actions: readonly BulkAction[]): Promise<void> {
  const { options, logger, target } = run;
  const lines = await removedSinceRead(options.knex, actions).catch((err: unknown) => {
    throw new IndexingError("FINALIZE_FAILED", "looking up products removed since the run's snapshot failed", { cause: err, unavailable: isDatabaseUnavailable(err) });
  });
  if (lines.length === 0) return;
  const stats = await sendBulks(once(toBulkLines(lines)), {
    client: options.elasticsearch,
    index: target,
    bulkSize: options.bulkSize,
    maxBytes: options.bulkMaxBytes,
    concurrency: 1,
    signal: options.signal,
    onDrop: (action, failure) => logger.warn({ goods_no: action.id, physical_index: target, ...failure }, "deleting a product removed since the run's snapshot failed"),
  });
  const removed = stats.successful - stats.missing;
  if (run.removedAgain) run.removedAgain.count += removed;
  if (removed > 0) logger.info({ removed }, "deleted again products removed since the run's snapshot");
}

async function* once<T>(item: T): AsyncGenerator<T> {
  yield item;
}

/** Cursor and incremental documents are searchable when the run answers. */
async function refresh(client: Client, index: string): Promise<void> {
  try {
    await client.indices.refresh({ index });
  } catch (err) {
    throw new IndexingError("BULK_FAILED", `refreshing '${index}' after the run failed`, { cause: err });
  }
}

/** The drift at the end of the run; a failed measurement does not fail a run that indexed. */
async function drift(options: GoodsIndexingOptions, logger: Logger): Promise<number | undefined> {
  try {
    const measured = await measureDrift(options.knex, options.elasticsearch, options.index);
    options.metrics?.driftMeasured(measured);
    return measured.drift;
  } catch (err) {
    logger.warn({ err: messageOf(err) }, "measuring the drift failed");
    return undefined;
  }
}

async function record(
  options: GoodsIndexingOptions,
  logger: Logger,
  run: { success: boolean; startedAt: Date; result?: IndexingResult },
): Promise<void> {
  const { result } = run;
  try {
    await recordRun(options.knex, {
      mode: options.mode,
      success: run.success,
      startedAt: run.startedAt,
      finishedAt: await databaseNow(options.knex),
      fetchedCount: result?.fetchedCount ?? 0,
      indexedCount: result?.indexedCount ?? 0,
      failedCount: result?.failedCount ?? 0,
      removedCount: result?.removedCount ?? 0,
      actor: options.actor ?? ACTOR_UNKNOWN,
    });
  } catch (err) {
    logger.warn({ err: messageOf(err) }, "recording the run failed");
  }
}

import type { Knex } from "knex";
import { ACTOR_UNKNOWN } from "../../actor.js";
import type { Logger } from "pino";
import { InvalidInputError, messageOf, OperationFailedError } from "../../errors.js";
import type { IndexingMetrics } from "../indexing-metrics.js";
import type { JobLock } from "../job-lock.js";
import { productBatchId } from "./batch-id.js";
import type { BatchErrorInfo, BatchLogStore, BatchStatus } from "./batch-log.js";
import { countsOf, PRODUCT_BATCH_JOB, recordBatch, SOURCE_TABLE, type BatchRecordContext } from "./batch-record.js";
import { clampChunkSize } from "./chunk-size.js";
import { indexingFailureOf, type IndexingStats } from "./indexing-failure.js";
import { loadGoods, LoadStepError, type LoadResult } from "./load-steps.js";

// The product batch (SPEC.md section 3): step 1 load with 1a-1d, step 2 cursor indexing, step 3
// the batch log. Failure rules: a load failure stops the batch (FAILED, 500); an indexing
// failure is a warning (COMPLETED, 200), the rows stay INDEX_YN='N' for the next cursor run;
// anything unexpected is caught, logged as FAILED and answered 500, and the process goes on.

/** Step 2: cursor-mode indexing of the INDEX_YN='N' rows with the given bulk size. */
export type CursorIndexer = (options: { bulkSize: number; signal: AbortSignal; rebuild: boolean; actor: string }) => Promise<IndexingStats>;

export interface BatchServiceOptions {
  knex: Knex;
  lock: Pick<JobLock, "run">;
  indexCursor: CursorIndexer;
  logs: BatchLogStore;
  /** The goods index that step 2 writes, recorded in the log. */
  goodsIndex: string;
  logger: Logger;
  now?: () => Date;
  metrics?: Pick<IndexingMetrics, "batchFinished">;
}

export interface BatchRequest {
  /** Absent: full load; otherwise only source rows changed in the last N minutes (N >= 1). */
  intervalMinutes?: number;
  chunkSize?: number;
  /** Who runs the batch (src/actor.ts): a token's name, cron for the nightly schedule; default unknown. */
  actor?: string;
}

export interface BatchResult {
  success: boolean;
  batchId: string;
  status: BatchStatus;
  isFullLoad: boolean;
  loadedCount: number;
  fetchedCount: number;
  indexedCount: number;
  failedCount: number;
  chunkSize: number;
  warnings: string[];
  elapsedMs: number;
  message: string;
}

export interface BatchService {
  /** Runs the whole batch under the job lock; an overlapping call fails with ConflictError (409). */
  run(request: BatchRequest): Promise<BatchResult>;
}

export function createBatchService(options: BatchServiceOptions): BatchService {
  return {
    async run({ intervalMinutes, chunkSize: requested, actor }) {
      if (intervalMinutes !== undefined && intervalMinutes < 1) {
        throw new InvalidInputError(`interval_minutes must be an integer >= 1, got ${intervalMinutes}`, {
          extra: { field: "interval_minutes" },
        });
      }
      const { chunkSize, warning } = clampChunkSize(requested);
      return options.lock.run(PRODUCT_BATCH_JOB, (signal) =>
        execute(options, { intervalMinutes, chunkSize, warnings: warning ? [warning] : [], signal, actor: actor ?? ACTOR_UNKNOWN }),
      );
    },
  };
}

interface Execution {
  intervalMinutes: number | undefined;
  chunkSize: number;
  warnings: string[];
  signal: AbortSignal;
  actor: string;
}

async function execute(options: BatchServiceOptions, run: Execution): Promise<BatchResult> {
  const now = options.now ?? (() => new Date());
  const startedAt = now();
  const batchId = productBatchId(startedAt);
  const logger = options.logger.child({ batch_id: batchId });
  const context: BatchRecordContext = {
    logs: options.logs,
    logger,
    batchId,
    startedAt,
    isFullLoad: run.intervalMinutes === undefined,
    chunkSize: run.chunkSize,
    goodsIndex: options.goodsIndex,
    now,
    metrics: options.metrics,
    knex: options.knex,
    actor: run.actor,
  };
  logger.info({ is_full_load: context.isFullLoad, chunk_size: run.chunkSize, actor: run.actor }, "product batch started");
  try {
    const load = await loadStep(options, run, context);
    const { stats, error } = await indexStep(options, run, logger);
    const warnings = [...run.warnings, ...indexingWarnings(stats, error)];
    const message = summary(load, stats, warnings);
    if (!(await recordBatch(context, { status: "COMPLETED", stats, message, error }))) {
      warnings.push("the batch log could not be saved");
    }
    const elapsedMs = now().getTime() - startedAt.getTime();
    logger.info({ ...snakeCounts(stats), elapsed_ms: elapsedMs, warnings }, "product batch completed");
    const { isFullLoad, chunkSize } = context;
    return { success: true, batchId, status: "COMPLETED", isFullLoad, loadedCount: load.loadedCount, ...countsOf(stats), chunkSize, warnings, elapsedMs, message };
  } catch (err) {
    if (err instanceof OperationFailedError) throw err;
    logger.error({ err }, "product batch failed unexpectedly");
    const error = { code: "INTERNAL_ERROR", step: "batch", message: messageOf(err) };
    await recordBatch(context, { status: "FAILED", message: "the batch failed with an unexpected error", error });
    throw new OperationFailedError(`product batch ${batchId} failed with an internal error`, {
      extra: { batch_id: batchId, status: "FAILED", code: "INTERNAL_ERROR" },
    });
  }
}

/** Step 1 with 1a-1d; a failure saves the FAILED log and ends the batch with a 500. */
async function loadStep(options: BatchServiceOptions, run: Execution, context: BatchRecordContext): Promise<LoadResult> {
  try {
    const load = await loadGoods(options.knex, { at: context.startedAt, intervalMinutes: run.intervalMinutes });
    context.logger.info({ loaded_count: load.loadedCount, changed: load.changed, step_ms: load.stepMs }, "product batch load done");
    return load;
  } catch (err) {
    const step = err instanceof LoadStepError ? err.step : "1-load";
    context.logger.error({ err, step }, "product batch load failed");
    const error = { code: "LOAD_FAILED", step: "load", message: messageOf(err) };
    await recordBatch(context, { status: "FAILED", message: `load failed at step ${step}; ${SOURCE_TABLE} is unchanged`, error });
    throw new OperationFailedError(
      `product batch ${context.batchId} failed: loading ${SOURCE_TABLE} failed at step ${step}; the table is unchanged`,
      { extra: { batch_id: context.batchId, status: "FAILED", code: "LOAD_FAILED" } },
    );
  }
}

/** Step 2; a failure the indexer reports comes back as `error`, anything else is rethrown. */
async function indexStep(options: BatchServiceOptions, run: Execution, logger: Logger) {
  try {
    const rebuild = run.intervalMinutes === undefined;
    return { stats: await options.indexCursor({ bulkSize: run.chunkSize, signal: run.signal, rebuild, actor: run.actor }), error: undefined };
  } catch (err) {
    // An abort (shutdown) leaves the loaded rows at N like any indexing failure: not a bug.
    const aborted = run.signal.aborted ? { code: "BULK_FAILED", message: "indexing was aborted: the service is shutting down" } : undefined;
    const failure = indexingFailureOf(err) ?? aborted;
    if (!failure) throw err;
    logger.warn({ err, code: failure.code }, "product batch indexing failed; rows stay INDEX_YN='N'");
    const error: BatchErrorInfo = { code: failure.code, step: "index", message: failure.message };
    return { stats: undefined, error };
  }
}

function indexingWarnings(stats: IndexingStats | undefined, error: BatchErrorInfo | undefined): string[] {
  if (error) {
    return [`indexing failed (${error.code}): ${error.message}; the rows stay INDEX_YN='N' and the next cursor run indexes them`];
  }
  if (stats && stats.failedCount > 0) {
    return [`${stats.failedCount} documents were rejected by the search engine; their rows stay INDEX_YN='N'`];
  }
  return [];
}

function summary(load: LoadResult, stats: IndexingStats | undefined, warnings: string[]): string {
  const kind = load.isFullLoad ? "full load" : "incremental load";
  const { fetchedCount, indexedCount, failedCount } = countsOf(stats);
  const indexing = stats ? `indexed ${indexedCount} of ${fetchedCount} rows, ${failedCount} failed` : "indexing failed";
  const noted = warnings.length === 0 ? "" : ` (${warnings.length} warning${warnings.length === 1 ? "" : "s"})`;
  return `${kind} of ${load.loadedCount} rows; ${indexing}${noted}`;
}

function snakeCounts(stats: IndexingStats | undefined) {
  const { fetchedCount, indexedCount, failedCount } = countsOf(stats);
  return { fetched_count: fetchedCount, indexed_count: indexedCount, failed_count: failedCount, removed_count: stats?.removedCount ?? 0, drift: stats?.drift };
}

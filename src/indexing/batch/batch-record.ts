import type { Knex } from "knex";
import type { Logger } from "pino";
import { recordRun } from "../goods/index-runs.js";
import type { BatchErrorInfo, BatchLogDocument, BatchLogStore, BatchStatus } from "./batch-log.js";
import type { IndexingMetrics } from "../indexing-metrics.js";
import type { IndexingStats } from "./indexing-failure.js";

// Step 3 of the batch: the log document of one execution. Saving it never throws: a batch that
// did its work is not undone by a log index that refuses a write; the caller is told instead.

export const PRODUCT_BATCH_JOB = "product_batch";
export const SOURCE_TABLE = "PR_GOODS_SEARCH_INTF";

export interface BatchRecordContext {
  logs: BatchLogStore;
  logger: Logger;
  batchId: string;
  startedAt: Date;
  isFullLoad: boolean;
  chunkSize: number;
  goodsIndex: string;
  now: () => Date;
  metrics?: Pick<IndexingMetrics, "batchFinished">;
  /** Where the batch's run is recorded for the status RPC and the schedule's window. */
  knex: Knex;
  /** Who ran the batch (src/actor.ts). */
  actor: string;
}

export interface BatchOutcome {
  status: BatchStatus;
  stats?: IndexingStats;
  message: string;
  error?: BatchErrorInfo;
}

/** Counts of step 2, zero when it did not run or failed. */
export function countsOf(stats: IndexingStats | undefined) {
  return { fetchedCount: stats?.fetchedCount ?? 0, indexedCount: stats?.indexedCount ?? 0, failedCount: stats?.failedCount ?? 0 };
}

export function batchLogDocument(context: BatchRecordContext, outcome: BatchOutcome, finishedAt: Date): BatchLogDocument {
  const { fetchedCount, indexedCount, failedCount } = countsOf(outcome.stats);
  return {
    batch_id: context.batchId,
    job_name: PRODUCT_BATCH_JOB,
    status: outcome.status,
    started_at: context.startedAt.toISOString(),
    finished_at: finishedAt.toISOString(),
    elapsed_ms: finishedAt.getTime() - context.startedAt.getTime(),
    actor: context.actor,
    details: {
      fetched_count: fetchedCount,
      indexed_count: indexedCount,
      failed_count: failedCount,
      source_index: SOURCE_TABLE,
      target_index: context.goodsIndex,
      job_type: context.isFullLoad ? "full" : "incremental",
      chunk_size: context.chunkSize,
      message: outcome.message,
      ...(outcome.error ? { error: outcome.error } : {}),
      ...(outcome.stats ? { removed_count: outcome.stats.removedCount ?? 0 } : {}),
      ...(outcome.stats?.drift !== undefined ? { drift: outcome.stats.drift } : {}),
    },
  };
}

/** Saves the log document; false (and an error line) when it could not be saved. */
export async function recordBatch(context: BatchRecordContext, outcome: BatchOutcome): Promise<boolean> {
  context.metrics?.batchFinished(outcome.status);
  await recordBatchRun(context, outcome);
  try {
    await context.logs.save(batchLogDocument(context, outcome, context.now()));
    return true;
  } catch (err) {
    context.logger.error({ err, status: outcome.status }, "saving the batch log failed");
    return false;
  }
}

/** The batch as the last "batch" run; it covers the schedule's window only when it indexed everything. */
async function recordBatchRun(context: BatchRecordContext, outcome: BatchOutcome): Promise<void> {
  const { stats } = outcome;
  try {
    await recordRun(context.knex, {
      mode: "batch",
      success: outcome.status === "COMPLETED" && outcome.error === undefined && (stats?.failedCount ?? 0) === 0,
      startedAt: context.startedAt,
      finishedAt: context.now(),
      ...countsOf(stats),
      removedCount: stats?.removedCount ?? 0,
      actor: context.actor,
    });
  } catch (err) {
    context.logger.warn({ err, status: outcome.status }, "recording the batch run failed");
  }
}

import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { IndexingConfig } from "../config.js";
import { messageOf, UnavailableError } from "../errors.js";
import type { IndexingMode } from "./goods/goods-rows.js";
import type { IndexingMetrics } from "./indexing-metrics.js";
import type { JobLock } from "./job-lock.js";
import { runGoodsIndexing, type IndexingResult } from "./modes.js";

// The one way into an indexing run. Every caller (the IndexGoods RPC, the batch's step 2, the cron
// runner's incremental run) says which run it wants; the pipeline options come from the
// configuration here, once, and the job lock is taken here, once. The batch holds the lock for its
// whole load-then-index, so its step 2 runs inside it (runHeld).

export interface RunRequest {
  mode: IndexingMode;
  /** The job's name in the lock, the logs and the run records; default index_goods_<mode>. */
  job?: string;
  /** Incremental: the window in minutes, or how to find it once the lock is held. */
  intervalMinutes?: number | (() => Promise<number>);
  /** Cursor mode: build a new physical index and move the alias (the batch's full load). */
  rebuild?: boolean;
  /** Documents per bulk request; default INDEX_BULK_SIZE. */
  bulkSize?: number;
  /** Who asked (src/actor.ts): a token's name, cron for the schedule; recorded with the run. */
  actor: string;
}

export interface IndexingRuns {
  /**
   * Takes the job lock (a job already running answers 409 naming it), runs, releases the lock. A
   * run stopped by shutdown answers 503; other failures are thrown as the run raised them.
   */
  run(request: RunRequest): Promise<IndexingResult>;
  /** The same run under a lock the caller already holds, stopped by its signal. */
  runHeld(request: RunRequest, signal: AbortSignal): Promise<IndexingResult>;
}

export interface IndexingRunsDeps {
  knex: Knex;
  elasticsearch: Client;
  logger: Logger;
  indexing: IndexingConfig;
  jobLock: JobLock;
  metrics?: IndexingMetrics;
}

export function createIndexingRuns(deps: IndexingRunsDeps): IndexingRuns {
  const { indexing } = deps;
  const pipeline = {
    knex: deps.knex,
    elasticsearch: deps.elasticsearch,
    logger: deps.logger,
    metrics: deps.metrics,
    index: indexing.goodsIndex,
    analyzer: indexing.goodsAnalyzer,
    fetchSize: indexing.fetchSize,
    bulkMaxBytes: indexing.bulkMaxBytes,
    bulksInFlight: indexing.bulksInFlight,
    channelCapacity: indexing.channelCapacity > 0 ? indexing.channelCapacity : undefined,
  };

  async function runHeld(request: RunRequest, signal: AbortSignal): Promise<IndexingResult> {
    const { intervalMinutes } = request;
    return runGoodsIndexing({
      ...pipeline,
      mode: request.mode,
      job: request.job,
      actor: request.actor,
      rebuild: request.rebuild,
      intervalMinutes: typeof intervalMinutes === "function" ? await intervalMinutes() : intervalMinutes,
      bulkSize: request.bulkSize ?? indexing.bulkSize,
      signal,
    });
  }

  return {
    runHeld,
    run: (request) =>
      deps.jobLock.run(request.job ?? `index_goods_${request.mode}`, (signal) =>
        runHeld(request, signal).catch((err: unknown) => {
          throw signal.aborted ? stoppedError(request.mode, signal, err) : err;
        }),
      ),
  };
}

/**
 * A run stopped by its signal (shutdown) failed because the service is going away, whatever
 * error the interrupted step raised: 503, so that a client knows to run it again.
 */
function stoppedError(mode: string, signal: AbortSignal, cause: unknown): UnavailableError {
  return new UnavailableError(`${mode} indexing stopped before it finished: ${messageOf(signal.reason)}; run it again`, { cause });
}

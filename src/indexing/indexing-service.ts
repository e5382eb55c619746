import type { MessageInitShape } from "@bufbuild/protobuf";
import { actorOf } from "../actor.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import type { Logger } from "pino";
import type { IndexGoodsResponseSchema, IndexingService } from "../../gen/search/v1/indexing_service_pb.js";
import type { IndexingConfig } from "../config.js";
import { DomainError, InvalidInputError, OperationFailedError, UnavailableError } from "../errors.js";
import type { BatchLogStore } from "./batch/batch-log.js";
import { batchLogMessage } from "./batch/batch-log-message.js";
import type { BatchService } from "./batch/batch-service.js";
import { IndexingError, isUnreachable } from "./indexing-error.js";
import { parseInterval } from "./interval.js";
import { lastRuns } from "./goods/index-runs.js";
import { measureDrift } from "./goods/index-status.js";
import type { IndexingMetrics } from "./indexing-metrics.js";
import type { IndexingResult } from "./modes.js";
import type { IndexingRuns } from "./run.js";
import type { LiveFollower, LiveStatus } from "./live/live-follower.js";

export interface IndexingServiceDeps {
  knex: Knex;
  elasticsearch: Client;
  logger: Logger;
  indexing: IndexingConfig;
  /** Every indexing run goes through it (run.ts). */
  runs: IndexingRuns;
  metrics?: IndexingMetrics;
  batch: BatchService;
  batchLogs: BatchLogStore;
  live: Pick<LiveFollower, "status">;
}

export const DEFAULT_LOG_LIMIT = 20;
export const MAX_LOG_LIMIT = 1000;

/** Every IndexingService RPC; each one is a thin call into the module that does its job. */
export function createIndexingService(deps: IndexingServiceDeps): ServiceImpl<typeof IndexingService> {
  return {
    async indexGoods(request, context) {
      const { mode, intervalMinutes } = parseInterval(request.interval);
      const result = await deps.runs.run({ mode, intervalMinutes, actor: actorOf(context) }).catch((err: unknown) => {
        throw toDomainError(err);
      });
      return indexGoodsResponse(result, deps.indexing.goodsIndex);
    },
    async getIndexStatus() {
      const [drift, runs, live] = await Promise.all([
        measureDrift(deps.knex, deps.elasticsearch, deps.indexing.goodsIndex).catch((err: unknown) => {
          throw isUnreachable(err) ? new UnavailableError("Elasticsearch is unreachable: cannot count the goods index", { cause: err }) : err;
        }),
        lastRuns(deps.knex),
        deps.live.status(),
      ]);
      deps.metrics?.driftMeasured(drift);
      return {
        ...drift,
        lastRuns: runs.map((run) => ({ ...run, startedAt: timestampFromDate(run.startedAt), finishedAt: timestampFromDate(run.finishedAt) })),
        live: liveMessage(live),
      };
    },
    runProductBatch: (req, context) => deps.batch.run({ intervalMinutes: req.intervalMinutes, chunkSize: req.chunkSize, actor: actorOf(context) }),
    async listBatchLogs(req) {
      const limit = req.limit ?? DEFAULT_LOG_LIMIT;
      if (limit < 1 || limit > MAX_LOG_LIMIT) {
        throw new InvalidInputError(`limit must be from 1 to ${MAX_LOG_LIMIT}, got ${limit}`, { extra: { field: "limit" } });
      }
      return { logs: (await deps.batchLogs.list(limit)).map(batchLogMessage) };
    },
  };
}

function liveMessage(live: LiveStatus) {
  return {
    enabled: live.enabled,
    state: live.state,
    pendingProducts: live.pendingProducts,
    retryingProducts: live.retryingProducts,
    oldestPendingAgeMs: BigInt(live.oldestPendingAgeMs),
    appliedTotal: BigInt(live.appliedTotal),
    lastAppliedAt: live.lastAppliedAt && timestampFromDate(live.lastAppliedAt),
  };
}

function indexGoodsResponse(result: IndexingResult, index: string): MessageInitShape<typeof IndexGoodsResponseSchema> {
  const success = result.failedCount === 0;
  const failed = success ? "" : `, ${result.failedCount} rejected (their rows stay to be indexed again)`;
  const removed = result.removedCount > 0 ? `, removed ${result.removedCount}` : "";
  return {
    success,
    mode: result.mode,
    message: `${result.mode} indexing into '${index}': fetched ${result.fetchedCount}, indexed ${result.indexedCount}${removed}${failed} in ${result.elapsedMs} ms`,
    fetchedCount: result.fetchedCount,
    indexedCount: result.indexedCount,
    failedCount: result.failedCount,
    removedCount: result.removedCount,
    elapsedMs: result.elapsedMs,
  };
}

/** IndexingError codes travel in the message and as `code` in the REST body; the run logged the failure. */
export function toDomainError(err: unknown): unknown {
  if (err instanceof DomainError) return err;
  if (err instanceof IndexingError) {
    const ErrorType = err.unavailable ? UnavailableError : OperationFailedError;
    return new ErrorType(err.message, { cause: err, extra: { code: err.code } });
  }
  return err;
}

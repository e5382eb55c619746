import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  BatchExecutionResponseSchema,
  BatchLogSchema,
  ListBatchLogsResponseSchema,
  type BatchLog,
  type IndexingService,
} from "../../../gen/search/v1/indexing_service_pb.js";
import { InvalidInputError } from "../../errors.js";
import type { BatchLogDocument, BatchLogStore } from "./batch-log.js";
import type { BatchService } from "./batch-service.js";

// The two batch RPCs of IndexingService: request checks and message mapping only; the work is
// in the batch service and the log store.

const DEFAULT_LOG_LIMIT = 20;
const MAX_LOG_LIMIT = 1000;

type BatchRpcs = Pick<ServiceImpl<typeof IndexingService>, "runProductBatch" | "listBatchLogs">;

export function createBatchRpcs(deps: { batch: BatchService; logs: BatchLogStore }): BatchRpcs {
  return {
    async runProductBatch(req) {
      const result = await deps.batch.run({ intervalMinutes: req.intervalMinutes, chunkSize: req.chunkSize });
      return create(BatchExecutionResponseSchema, result);
    },
    async listBatchLogs(req) {
      const limit = req.limit ?? DEFAULT_LOG_LIMIT;
      if (limit < 1 || limit > MAX_LOG_LIMIT) {
        throw new InvalidInputError(`limit must be from 1 to ${MAX_LOG_LIMIT}, got ${limit}`, { extra: { field: "limit" } });
      }
      const documents = await deps.logs.list(limit);
      return create(ListBatchLogsResponseSchema, { logs: documents.map(toBatchLog) });
    },
  };
}

function toBatchLog(doc: BatchLogDocument): BatchLog {
  const { details } = doc;
  return create(BatchLogSchema, {
    batchId: doc.batch_id,
    jobName: doc.job_name,
    status: doc.status,
    startedAt: timestampFromDate(new Date(doc.started_at)),
    finishedAt: timestampFromDate(new Date(doc.finished_at)),
    elapsedMs: doc.elapsed_ms,
    details: {
      fetchedCount: details.fetched_count,
      indexedCount: details.indexed_count,
      failedCount: details.failed_count,
      sourceIndex: details.source_index,
      targetIndex: details.target_index,
      jobType: details.job_type,
      chunkSize: details.chunk_size,
      message: details.message,
      error: details.error,
    },
  });
}

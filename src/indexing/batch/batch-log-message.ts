import { create } from "@bufbuild/protobuf";
import { ACTOR_UNKNOWN } from "../../actor.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { BatchLogSchema, type BatchLog } from "../../../gen/search/v1/indexing_service_pb.js";
import type { BatchLogDocument } from "./batch-log.js";

/** A batch log document (snake_case, as stored) as the BatchLog message. */
export function batchLogMessage(doc: BatchLogDocument): BatchLog {
  const { details } = doc;
  return create(BatchLogSchema, {
    batchId: doc.batch_id,
    jobName: doc.job_name,
    status: doc.status,
    startedAt: timestampFromDate(new Date(doc.started_at)),
    finishedAt: timestampFromDate(new Date(doc.finished_at)),
    elapsedMs: doc.elapsed_ms,
    actor: doc.actor ?? ACTOR_UNKNOWN,
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
      removedCount: details.removed_count,
      drift: details.drift,
    },
  });
}

import type { ApiHints } from "../server/openapi/api-hints.js";
import type { BatchStatus } from "./batch/batch-log.js";
import { DEFAULT_CHUNK_SIZE } from "./batch/chunk-size.js";
import type { IndexingMode } from "./goods/goods-rows.js";
import { DEFAULT_LOG_LIMIT, MAX_LOG_LIMIT } from "./indexing-service.js";

// What IndexingService's code knows beyond the protos (src/server/openapi/api-hints.ts).

const MODES: readonly IndexingMode[] = ["full", "incremental", "cursor"];
const BATCH_STATUSES: readonly BatchStatus[] = ["COMPLETED", "FAILED"];

export const INDEXING_API_HINTS: ApiHints = {
  fields: {
    "search.v1.IndexGoodsResponse.mode": { enum: [...MODES] },
    "search.v1.RunProductBatchRequest.interval_minutes": { minimum: 1 },
    "search.v1.RunProductBatchRequest.chunk_size": { default: DEFAULT_CHUNK_SIZE },
    "search.v1.BatchExecutionResponse.status": { enum: [...BATCH_STATUSES] },
    "search.v1.ListBatchLogsRequest.limit": { minimum: 1, maximum: MAX_LOG_LIMIT, default: DEFAULT_LOG_LIMIT },
  },
  errors: {
    "search.v1.IndexingService.IndexGoods": [409],
    "search.v1.IndexingService.RunProductBatch": [409],
  },
};

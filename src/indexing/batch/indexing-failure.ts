import { errors } from "@elastic/elasticsearch";
import { UnavailableError } from "../../errors.js";

/** Counts of one indexing run, as the indexing modes report them. */
export interface IndexingStats {
  fetchedCount: number;
  indexedCount: number;
  failedCount: number;
  elapsedMs: number;
  removedCount?: number;
  drift?: number;
}

/** Error codes with which the indexing pipeline reports a failure it detected. */
const INDEXING_CODES = new Set(["OPTIMIZE_FAILED", "DB_STREAM_ERROR", "FINALIZE_FAILED", "BULK_FAILED"]);

export interface IndexingFailure {
  code: string;
  message: string;
}

/**
 * Classifies an error thrown by step 2. A failure the pipeline reports (one of its codes) or an
 * unreachable or refusing search engine is an indexing failure, which the batch turns into a
 * warning; anything else (a bug) is unexpected and fails the batch. Returns undefined then.
 */
export function indexingFailureOf(err: unknown): IndexingFailure | undefined {
  const message = err instanceof Error ? err.message : String(err);
  const code = codeOf(err);
  if (code !== undefined && INDEXING_CODES.has(code)) return { code, message };
  if (err instanceof UnavailableError) return { code: "BULK_FAILED", message };
  // The client's own messages name hosts and request details; the batch reports plain words.
  if (err instanceof errors.ConnectionError || err instanceof errors.TimeoutError) {
    return { code: "BULK_FAILED", message: "the search engine is unreachable" };
  }
  if (err instanceof errors.ResponseError) {
    return { code: "BULK_FAILED", message: `the search engine refused a request (status ${err.statusCode ?? "unknown"})` };
  }
  return undefined;
}

function codeOf(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const direct = (err as { code?: unknown }).code;
  if (typeof direct === "string") return direct;
  const extra = (err as { extra?: Record<string, unknown> }).extra;
  return typeof extra?.code === "string" ? extra.code : undefined;
}

import { errors } from "@elastic/elasticsearch";
import { UnavailableError } from "../../errors.js";
import { IndexingError } from "../indexing-error.js";

/** Counts of one indexing run, as the indexing modes report them. */
export interface IndexingStats {
  fetchedCount: number;
  indexedCount: number;
  failedCount: number;
  elapsedMs: number;
  removedCount?: number;
  drift?: number;
}

export interface IndexingFailure {
  code: string;
  message: string;
}

/**
 * Classifies an error thrown by step 2. A failure the pipeline reports (an IndexingError, whatever
 * its code, so that a code added later cannot be forgotten here) or an
 * unreachable or refusing search engine is an indexing failure, which the batch turns into a
 * warning; anything else (a bug) is unexpected and fails the batch. Returns undefined then.
 */
export function indexingFailureOf(err: unknown): IndexingFailure | undefined {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof IndexingError) return { code: err.code, message };
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

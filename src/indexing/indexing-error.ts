import { errors } from "@elastic/elasticsearch";
import { isDatabaseUnavailable } from "../db/database-errors.js";
import { UnavailableError } from "../errors.js";
// Failures of an indexing run, each tagged with the contract's error code (SPEC.md section 3) so
// that the REST body, the batch log and the logs all carry the same `code`.

export type IndexingErrorCode = "OPTIMIZE_FAILED" | "DB_STREAM_ERROR" | "FINALIZE_FAILED" | "BULK_FAILED" | "ALIAS_SWAP_FAILED";

export class IndexingError extends Error {
  readonly code: IndexingErrorCode;
  /** True when the cause is a dependency that could not be reached (database or search engine). */
  readonly unavailable: boolean;

  constructor(code: IndexingErrorCode, message: string, options: { cause?: unknown; unavailable?: boolean } = {}) {
    super(`${code}: ${message}`, { cause: options.cause });
    this.name = "IndexingError";
    this.code = code;
    this.unavailable = options.unavailable ?? false;
  }
}

/** Whether Elasticsearch could not be reached at all (as opposed to answering with an error). */
export function isUnreachable(err: unknown): boolean {
  return err instanceof errors.ConnectionError || err instanceof errors.TimeoutError || err instanceof errors.NoLivingConnectionsError;
}

/**
 * The code a failed run is logged and counted under (metric label `outcome`): its IndexingError
 * code, UNAVAILABLE when a dependency could not be reached, INTERNAL for anything unexpected.
 */
export function errorCodeOf(err: unknown): string {
  if (err instanceof IndexingError) return err.code;
  if (err instanceof UnavailableError || isUnreachable(err) || isDatabaseUnavailable(err)) return "UNAVAILABLE";
  return "INTERNAL";
}

/** Whether a failed run's cause is a dependency that is down (expected now and then: logged as a warning, no stack trace). */
export function isDependencyDown(err: unknown): boolean {
  return err instanceof UnavailableError || (err instanceof IndexingError && err.unavailable) || isDatabaseUnavailable(err);
}

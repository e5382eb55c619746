import type { Knex } from "knex";
import { UnavailableError } from "../errors.js";

// The API's heavier reads (the dashboard's history and spend) run with a statement timeout, so
// that a slow one gives its pooled connection back instead of starving the proxy's routing
// lookups, which share the pool. The limit is set for the read's own transaction only.

/** API_READ_TIMEOUT_MS's default, ms: the dashboard asks again every 5 s. */
export const DEFAULT_READ_TIMEOUT_MS = 5_000;

/** SQLSTATE query_canceled: here, the statement timeout set below. */
const QUERY_CANCELED = "57014";

/** Runs `read` in a transaction whose statements are cancelled after `timeoutMs`; a cancelled read is a 503 that says so. */
export async function readWithTimeout<T>(knex: Knex, timeoutMs: number, read: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  try {
    return await knex.transaction(
      async (trx) => {
        await trx.raw("select set_config('statement_timeout', ?, true)", [String(Math.round(timeoutMs))]);
        return read(trx);
      },
      { readOnly: true },
    );
  } catch (err) {
    if (isStatementTimeout(err)) {
      throw new UnavailableError(`the database took longer than ${timeoutMs} ms to answer this read (API_READ_TIMEOUT_MS); try again shortly`, {
        cause: err,
        extra: { code: "read_timeout" },
      });
    }
    throw err;
  }
}

function isStatementTimeout(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === QUERY_CANCELED;
}

// Recognises "the database cannot be reached" among the errors pg and knex throw, so that callers
// answer 503 `unavailable` instead of 500. knex prefixes a failed query's message with its SQL, so
// the text reported here is built from codes, never from the message.

// Network errors of the socket to PostgreSQL.
const NETWORK_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "EPIPE"]);

// SQLSTATEs of a server that shuts down, restarts, refuses connections or ran out of them.
const SERVER_CODES = new Set(["57P01", "57P02", "57P03", "53300"]);

// pg reports a connection lost mid-query without a code; these are its messages, at the start or
// after knex's `<sql> - ` prefix.
const LOST_CONNECTION = [
  /(?:^| - )Connection terminated/,
  /connection error and is not queryable/,
  /(?:^| - )Client was closed and is not queryable/,
  /Cannot use a pool after calling end/,
  // SQLSTATE 55000 is generic; with this message it is a database closed to connections.
  /is not currently accepting connections/,
];

/** True when `err` (or its cause) says PostgreSQL is unreachable, refusing or dropping connections. */
export function isDatabaseUnavailable(err: unknown): boolean {
  return unavailableCode(err) !== undefined;
}

/** A short description of a database failure that holds no SQL and no input values. */
export function databaseErrorText(err: unknown): string {
  const code = unavailableCode(err);
  if (code !== undefined) return code;
  const sqlState = (err as { code?: unknown } | null)?.code;
  return typeof sqlState === "string" ? sqlState : "error";
}

function unavailableCode(err: unknown, depth = 0): string | undefined {
  if (typeof err !== "object" || err === null || depth > 4) return undefined;
  const { code, name, message, cause } = err as { code?: unknown; name?: unknown; message?: unknown; cause?: unknown };
  if (typeof code === "string" && (NETWORK_CODES.has(code) || SERVER_CODES.has(code) || code.startsWith("08"))) return code;
  if (name === "KnexTimeoutError") return "connection pool timeout";
  if (typeof message === "string" && LOST_CONNECTION.some((pattern) => pattern.test(message))) return "connection lost";
  if (err instanceof AggregateError) {
    for (const inner of err.errors) {
      const found = unavailableCode(inner, depth + 1);
      if (found !== undefined) return found;
    }
  }
  return unavailableCode(cause, depth + 1);
}

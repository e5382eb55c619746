import { describe, expect, it } from "vitest";
import { databaseErrorText, isDatabaseUnavailable } from "../../src/db/database-errors.js";

// knex rewrites a failed query's message as `<sql> - <pg's message>`; pg reports a connection lost
// mid-query with a message and no code. Seen under bench:chaos: a GPU request whose connection was
// terminated while its query ran answered 500 instead of 503.

/** The error knex throws when pg rejects `sql` with `message`. */
function knexError(sql: string, message: string): Error {
  return new Error(`${sql} - ${message}`);
}

describe("isDatabaseUnavailable", () => {
  it.each(["Connection terminated unexpectedly", "Connection terminated", "Client was closed and is not queryable"])(
    "recognises '%s' behind knex's SQL prefix",
    (message) => {
      const err = knexError(`select sum("n") as "n" from "gpu_instance_stats"`, message);
      expect(isDatabaseUnavailable(err)).toBe(true);
      expect(databaseErrorText(err)).toBe("connection lost");
    },
  );

  it("recognises pg's own message, unprefixed", () => {
    expect(isDatabaseUnavailable(new Error("Connection terminated unexpectedly"))).toBe(true);
  });

  it("does not take a query error for a lost connection", () => {
    expect(isDatabaseUnavailable(Object.assign(knexError("select 1", 'relation "x" does not exist'), { code: "42P01" }))).toBe(false);
  });
});

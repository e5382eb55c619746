import { errors } from "@elastic/elasticsearch";
import { describe, expect, it } from "vitest";
import { OperationFailedError, UnavailableError } from "../../src/errors.js";
import { errorCodeOf, IndexingError } from "../../src/indexing/indexing-error.js";

describe("errorCodeOf (the outcome label and the 'indexing failed' line)", () => {
  it("is the contract's code of an indexing failure", () => {
    expect(errorCodeOf(new IndexingError("BULK_FAILED", "x"))).toBe("BULK_FAILED");
    expect(errorCodeOf(new IndexingError("DB_STREAM_ERROR", "x", { unavailable: true }))).toBe("DB_STREAM_ERROR");
  });

  it("is UNAVAILABLE when a dependency could not be reached", () => {
    expect(errorCodeOf(new UnavailableError("down"))).toBe("UNAVAILABLE");
    expect(errorCodeOf(new errors.ConnectionError("connect ECONNREFUSED"))).toBe("UNAVAILABLE");
    // The job lock's connection refused by a database closed to connections, as pg reports it.
    expect(errorCodeOf(Object.assign(new Error('database "goods" is not currently accepting connections'), { code: "55000" }))).toBe("UNAVAILABLE");
  });

  it("is INTERNAL for anything unexpected, never a bare 'error'", () => {
    expect(errorCodeOf(new Error("boom"))).toBe("INTERNAL");
    expect(errorCodeOf(new OperationFailedError("failed"))).toBe("INTERNAL");
    expect(errorCodeOf("a string")).toBe("INTERNAL");
  });
});

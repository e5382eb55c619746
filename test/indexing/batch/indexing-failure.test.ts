import { errors } from "@elastic/elasticsearch";
import { describe, expect, it } from "vitest";
import { UnavailableError } from "../../../src/errors.js";
import { indexingFailureOf } from "../../../src/indexing/batch/indexing-failure.js";
import { IndexingError } from "../../../src/indexing/indexing-error.js";

describe("indexingFailureOf", () => {
  it("keeps the code of a failure the indexing pipeline reports", () => {
    expect(indexingFailureOf(new IndexingError("FINALIZE_FAILED", "flag update failed"))).toEqual({
      code: "FINALIZE_FAILED",
      message: "FINALIZE_FAILED: flag update failed",
    });
  });

  it("keeps every code of IndexingError, the alias move's included", () => {
    const swap = indexingFailureOf(new IndexingError("ALIAS_SWAP_FAILED", "moving alias 'goods' failed"));
    expect(swap?.code).toBe("ALIAS_SWAP_FAILED");
  });

  it("treats an unreachable search engine as a bulk failure", () => {
    const connection = new errors.ConnectionError("connect ECONNREFUSED");
    expect(indexingFailureOf(connection)?.code).toBe("BULK_FAILED");
    expect(indexingFailureOf(new UnavailableError("search engine down"))?.code).toBe("BULK_FAILED");
  });

  it("does not excuse a bug: anything else is unexpected", () => {
    expect(indexingFailureOf(new TypeError("cannot read properties of undefined"))).toBeUndefined();
    expect(indexingFailureOf("boom")).toBeUndefined();
    expect(indexingFailureOf(Object.assign(new Error("x"), { code: "ECONNRESET" }))).toBeUndefined();
  });
});

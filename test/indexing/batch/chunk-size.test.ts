import { describe, expect, it } from "vitest";
import { clampChunkSize } from "../../../src/indexing/batch/chunk-size.js";

describe("clampChunkSize", () => {
  it("defaults to 50,000 without a warning", () => {
    expect(clampChunkSize(undefined)).toEqual({ chunkSize: 50_000 });
  });

  it("keeps values within 10,000..100,000", () => {
    expect(clampChunkSize(10_000)).toEqual({ chunkSize: 10_000 });
    expect(clampChunkSize(100_000)).toEqual({ chunkSize: 100_000 });
    expect(clampChunkSize(33_333)).toEqual({ chunkSize: 33_333 });
  });

  it("raises small values to 10,000 and says so", () => {
    expect(clampChunkSize(500)).toEqual({ chunkSize: 10_000, warning: expect.stringMatching(/500.*raised to 10000/) });
    expect(clampChunkSize(0).chunkSize).toBe(10_000);
    expect(clampChunkSize(-7).chunkSize).toBe(10_000);
  });

  it("lowers large values to 100,000 and says so", () => {
    expect(clampChunkSize(500_000)).toEqual({ chunkSize: 100_000, warning: expect.stringMatching(/500000.*lowered to 100000/) });
  });
});

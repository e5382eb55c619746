import { describe, expect, it } from "vitest";
import { productBatchId } from "../../../src/indexing/batch/batch-id.js";
import { kstTimestamp } from "../../../src/indexing/kst-timestamp.js";

describe("productBatchId", () => {
  it("is product_ + the KST time as yyyyMMddHHmmssSSS", () => {
    expect(productBatchId(new Date("2026-11-21T16:00:00.123Z"))).toBe("product_20261122010000123");
  });

  it("rolls the date over at 15:00 UTC, KST midnight", () => {
    expect(kstTimestamp(new Date("2026-12-31T14:59:59.999Z"))).toBe("20261231235959999");
    expect(kstTimestamp(new Date("2026-12-31T15:00:00.000Z"))).toBe("20270101000000000");
  });

  it("pads every field to its width", () => {
    expect(kstTimestamp(new Date("2027-01-01T00:01:02.003Z"))).toBe("20270101090102003");
  });
});

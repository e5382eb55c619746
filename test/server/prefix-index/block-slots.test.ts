import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BlockSlots } from "../../../src/server/prefix-index/block-slots.js";

describe("a replica's table of block slots", () => {
  it.each([
    ["0", 0],
    ["-1", -1],
    ["the lowest int32", -(2 ** 31)],
    ["the highest int32", 2 ** 31 - 1],
  ])("keeps the hash %s as any other", (_, hash) => {
    const slots = new BlockSlots(4);
    expect(slots.get(hash)).toBe(-1);
    slots.set(hash, 0);
    expect([slots.get(hash), slots.size]).toEqual([0, 1]);
    slots.delete(hash);
    expect([slots.get(hash), slots.size]).toEqual([-1, 0]);
  });

  it("answers as a Map would through any sets and deletes, growing past its first size", () => {
    // 60 hashes drawn at random (sequential ones would each get a home of their own), about half
    // of them in a table at most half full: clusters form, wrap round the table's end and are
    // shifted back by deletes. (Unbiased: fast-check's small values would make too few clusters.)
    const pool = fc.array(fc.noBias(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })), { minLength: 60, maxLength: 60 });
    const op = fc.record({ op: fc.constantFrom("set", "delete"), pick: fc.noBias(fc.nat({ max: 59 })) });
    fc.assert(
      fc.property(pool, fc.array(op, { minLength: 200, maxLength: 400 }), (pool, ops) => {
        const slots = new BlockSlots(1);
        const model = new Map<number, number>();
        ops.forEach(({ op, pick }, i) => {
          const hash = pool[pick]!;
          if (op === "set" && !model.has(hash)) {
            slots.set(hash, i);
            model.set(hash, i);
          } else if (op === "delete") {
            slots.delete(hash);
            model.delete(hash);
            // A delete moves entries: every one left is still found.
            for (const [kept, slot] of model) expect(slots.get(kept)).toBe(slot);
          }
          expect(slots.size).toBe(model.size);
        });
        for (const hash of pool) expect(slots.get(hash)).toBe(model.get(hash) ?? -1);
      }),
      { numRuns: 100 },
    );
  });
});

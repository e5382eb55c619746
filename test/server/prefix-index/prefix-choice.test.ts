import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BALANCE_ABSOLUTE, BALANCE_RELATIVE, choosePrefix } from "../../../src/server/prefix-index/prefix-choice.js";

/** The choice of candidates given as (blocks held, load) pairs. */
const choose = (candidates: ReadonlyArray<{ held: number; load: number }>) =>
  choosePrefix(
    candidates.map((c) => c.held),
    candidates.map((c) => c.load),
  );

describe("the prefix choice", () => {
  it.each([
    ["no replica holds any of the prompt: load decides", [{ held: 0, load: 3 }, { held: 0, load: 1 }], { outcome: "miss" }],
    ["the replica holding the longest prefix", [{ held: 2, load: 0 }, { held: 5, load: 1 }, { held: 0, load: 0 }], { outcome: "hit", index: 1 }],
    ["of equal prefixes, the less loaded", [{ held: 5, load: 3 }, { held: 5, load: 1 }], { outcome: "hit", index: 1 }],
    ["busier by 4 on an idle endpoint: still the prefix", [{ held: 5, load: 4 }, { held: 0, load: 0 }], { outcome: "hit", index: 0 }],
    ["busier by 5 on an idle endpoint: load decides", [{ held: 5, load: 5 }, { held: 0, load: 0 }], { outcome: "balanced" }],
    ["busier by more than 4 but not twice the least: still the prefix", [{ held: 5, load: 20 }, { held: 0, load: 10 }], { outcome: "hit", index: 0 }],
    ["more than twice the least and 4 more: load decides", [{ held: 5, load: 21 }, { held: 0, load: 10 }], { outcome: "balanced" }],
    ["twice the least but only 2 more: still the prefix", [{ held: 5, load: 4 }, { held: 0, load: 2 }], { outcome: "hit", index: 0 }],
    ["a single replica", [{ held: 3, load: 50 }], { outcome: "hit", index: 0 }],
  ] as const)("%s", (_, candidates, choice) => {
    expect(choose(candidates)).toEqual(choice);
  });

  it("sends to a holder no busier than the thresholds allow, and to the longest prefix among equally loaded ones", () => {
    fc.assert(
      fc.property(fc.array(fc.record({ held: fc.nat(20), load: fc.nat(40) }), { minLength: 1, maxLength: 8 }), (candidates) => {
        const least = Math.min(...candidates.map((c) => c.load));
        const longest = Math.max(...candidates.map((c) => c.held));
        const choice = choose(candidates);
        if (longest === 0) expect(choice.outcome).toBe("miss");
        else if (choice.outcome === "hit") {
          const chosen = candidates[choice.index]!;
          expect(chosen.held).toBe(longest);
          expect(chosen.load <= least + BALANCE_ABSOLUTE || chosen.load <= least * BALANCE_RELATIVE).toBe(true);
        } else {
          expect(choice.outcome).toBe("balanced");
          // Every holder of the longest prefix is past both thresholds.
          for (const c of candidates.filter((c) => c.held === longest)) expect(c.load > least + BALANCE_ABSOLUTE && c.load > least * BALANCE_RELATIVE).toBe(true);
        }
      }),
    );
  });
});

import { describe, expect, it } from "vitest";
import { createPrefillLane } from "../../../../src/gpu/marketplace/simulated/prefill-lane.js";

/** Prefills queued at the given moments on one lane; how long each waits until its prefill ends. */
function waits(prefills: Array<{ at: number; ms: number }>): number[] {
  let clock = 0;
  const lane = createPrefillLane(() => clock);
  return prefills.map(({ at, ms }) => {
    clock = at;
    return lane.enqueue(ms);
  });
}

describe("simulated model server: its prefill lane, one prompt read at a time", () => {
  it.each([
    { case: "an idle lane ends a prefill its own length after it arrives", prefills: [{ at: 1000, ms: 40 }], waits: [40] },
    { case: "prompts arriving together end one after another, in arrival order", prefills: [{ at: 0, ms: 40 }, { at: 0, ms: 40 }, { at: 0, ms: 10 }], waits: [40, 80, 90] },
    { case: "a prompt arriving mid-prefill waits for what remains of it", prefills: [{ at: 0, ms: 40 }, { at: 25, ms: 10 }], waits: [40, 25] },
    { case: "a prompt arriving after the lane emptied does not wait", prefills: [{ at: 0, ms: 40 }, { at: 100, ms: 10 }], waits: [40, 10] },
    { case: "a prompt found cached (a short prefill) waits only for the prefills queued before it", prefills: [{ at: 0, ms: 60 }, { at: 5, ms: 60 }, { at: 10, ms: 0.3 }], waits: [60, 115, 110.3] },
    { case: "a prefill of nothing on an idle lane is at once", prefills: [{ at: 0, ms: 0 }], waits: [0] },
  ])("$case", ({ prefills, waits: expected }) => {
    const got = waits(prefills);
    expected.forEach((wait, i) => expect(got[i]).toBeCloseTo(wait, 9));
  });

  it("reads the monotonic clock by default", () => {
    const lane = createPrefillLane();
    expect(lane.enqueue(1000)).toBeCloseTo(1000, 0);
    expect(lane.enqueue(0)).toBeGreaterThan(990);
  });
});

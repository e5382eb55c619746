import { describe, expect, it } from "vitest";
import { afterPass, backoffMs, FIRST_STEP } from "../../../src/indexing/live/live-steps.js";

// The follower's next step after a pass, and its waits: pure decisions, read as tables.

describe("the live follower's next step after a pass", () => {
  it.each([
    { claimed: 1000, listening: true, next: "pass", why: "a full batch: more is waiting" },
    { claimed: 1000, listening: undefined, next: "pass", why: "a full batch, whatever the flag" },
    { claimed: 3, listening: false, next: "pass", why: "not listening: changes during the pass sent no wake-up" },
    { claimed: 0, listening: false, next: "listen", why: "caught up, not listening: set the flag and look once more" },
    { claimed: 0, listening: undefined, next: "listen", why: "caught up, the flag unknown (after a poll that ran out)" },
    { claimed: 3, listening: true, next: "idle", why: "listening: a change during the pass has woken it already" },
    { claimed: 0, listening: true, next: "idle", why: "caught up and listening" },
  ])("$claimed claimed, listening $listening: $next ($why)", ({ claimed, listening, next }) => {
    expect(afterPass(claimed, 1000, listening).kind).toBe(next);
  });

  it("starts with a pass that has no failures behind it", () => {
    expect(FIRST_STEP).toEqual({ kind: "pass", failures: 0 });
  });

  it("backs off 0.5 s after a failure, doubling up to 5 s", () => {
    expect([1, 2, 3, 4, 5, 6, 20].map(backoffMs)).toEqual([500, 1000, 2000, 4000, 5000, 5000, 5000]);
  });
});

import { describe, expect, it } from "vitest";
import { createKeyUsage } from "../../../src/server/keys/key-usage.js";

// Each caller's usage per endpoint and minute in this process: absolute counts, the minutes that
// changed since a moment, and old minutes forgotten.

const MINUTE = 60_000;
const answer = (caller: string, promptTokens: number, completionTokens: number, estimated = false) => ({
  endpoint: "chat",
  caller,
  usage: { promptTokens, completionTokens, estimated },
});

describe("key usage per minute", () => {
  it("adds a caller's answers and refusals in their minute, apart from other callers and minutes", () => {
    let now = 10 * MINUTE + 5_000;
    const usage = createKeyUsage(() => now);
    usage.settled(answer("team-a", 10, 5));
    usage.settled(answer("team-a", 20, 7, true));
    usage.refused("team-a", "chat", "tpm_limit");
    usage.settled(answer("team-b", 1, 1));
    now += MINUTE;
    usage.settled(answer("team-a", 3, 3));
    const entries = usage.changedSince(0);
    expect(entries).toEqual([
      { caller: "team-a", endpointName: "chat", minute: new Date(10 * MINUTE), requests: 2, promptTokens: 30, completionTokens: 12, estimated: 1, refused: { tpm_limit: 1 }, lastAnsweredAt: new Date(10 * MINUTE + 5_000) },
      { caller: "team-b", endpointName: "chat", minute: new Date(10 * MINUTE), requests: 1, promptTokens: 1, completionTokens: 1, estimated: 0, refused: {}, lastAnsweredAt: new Date(10 * MINUTE + 5_000) },
      { caller: "team-a", endpointName: "chat", minute: new Date(11 * MINUTE), requests: 1, promptTokens: 3, completionTokens: 3, estimated: 0, refused: {}, lastAnsweredAt: new Date(11 * MINUTE + 5_000) },
    ]);
  });

  it("keeps when the minute's last answer ended, and none for a minute of refusals alone", () => {
    let now = 10 * MINUTE + 5_000;
    const usage = createKeyUsage(() => now);
    usage.settled(answer("team-a", 1, 1));
    now += 20_000;
    usage.refused("team-a", "chat", "rpm_limit");
    usage.refused("team-b", "chat", "rpm_limit");
    expect(usage.changedSince(0).map((e) => [e.caller, e.lastAnsweredAt])).toEqual([
      ["team-a", new Date(10 * MINUTE + 5_000)],
      ["team-b", null],
    ]);
  });

  it("gives the minutes changed since a moment, copies the caller cannot change, and forgets minutes long past", () => {
    let now = 10 * MINUTE;
    const usage = createKeyUsage(() => now);
    usage.settled(answer("a", 1, 1));
    const since = now + 1;
    now += 30_000;
    usage.settled(answer("b", 1, 1));
    const changed = usage.changedSince(since);
    expect(changed.map((e) => e.caller)).toEqual(["b"]);
    changed[0]!.requests = 99;
    expect(usage.changedSince(since)[0]!.requests).toBe(1);
    now += 7 * MINUTE;
    expect(usage.changedSince(0)).toEqual([]);
  });
});

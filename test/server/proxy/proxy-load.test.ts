import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createProxyLoad } from "../../../src/server/proxy/proxy-load.js";

// The proxy's counts in one process (module.ts, ProxyLoad), as the load publisher reads them: each
// caller's answers in flight per endpoint beside the endpoint's own counts. Pure; a fake clock.

beforeEach(() => {
  vi.useFakeTimers({ now: new Date("2026-11-29T12:00:00Z") });
});

afterEach(() => {
  vi.useRealTimers();
});

describe("answers in flight per caller", () => {
  it("counts each caller's answers per endpoint, and leaves out a caller back at zero", () => {
    const load = createProxyLoad();
    load.callerAnswer("7", "team-a", 1);
    load.callerAnswer("7", "team-a", 1);
    load.callerAnswer("7", "AUTH_TOKENS#1", 1);
    load.callerAnswer("8", "team-a", 1);
    expect(load.entries(3_000).map((e) => [e.endpointId, e.byCaller])).toEqual([
      ["7", { "team-a": 2, "AUTH_TOKENS#1": 1 }],
      ["8", { "team-a": 1 }],
    ]);

    load.callerAnswer("7", "team-a", -1);
    load.callerAnswer("7", "AUTH_TOKENS#1", -1);
    expect(load.entries(3_000).find((e) => e.endpointId === "7")!.byCaller).toEqual({ "team-a": 1 });
  });

  it("keeps publishing an endpoint while a caller has an answer in flight, its zero a while after, then forgets it", () => {
    const load = createProxyLoad();
    // Admitted and not yet sent (its body still coming): in flight for its caller, not for a replica.
    load.callerAnswer("9", "team-b", 1);
    vi.advanceTimersByTime(10_000);
    expect(load.entries(3_000)).toMatchObject([{ endpointId: "9", inFlight: 0, held: 0, byCaller: { "team-b": 1 } }]);

    load.callerAnswer("9", "team-b", -1);
    vi.advanceTimersByTime(2_000);
    expect(load.entries(3_000)).toMatchObject([{ endpointId: "9", byCaller: {} }]);
    vi.advanceTimersByTime(1_000);
    expect(load.entries(3_000)).toEqual([]);
  });

  it("counts a caller apart from the endpoint's requests held and in flight", () => {
    const load = createProxyLoad();
    load.arrived("5");
    load.held("5", 1);
    load.callerAnswer("5", "team-c", 1);
    load.held("5", -1);
    load.sent("5", "gpu-1", 1);
    expect(load.entries(3_000)).toMatchObject([{ endpointId: "5", inFlight: 1, held: 0, byReplica: { "gpu-1": 1 }, byCaller: { "team-c": 1 } }]);
  });
});

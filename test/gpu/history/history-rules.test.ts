import { describe, expect, it } from "vitest";
import { firstByteQuantile } from "../../../src/gpu/history/first-byte.js";
import { historyWindow } from "../../../src/gpu/history/history-window.js";
import { FIRST_BYTE_BOUNDS_MS } from "../../../src/module.js";
import { createProxyTraffic, withTraffic } from "../../../src/server/proxy/proxy-traffic.js";
import type { ProxyMetrics } from "../../../src/server/proxy/proxy-metrics.js";

// The pure rules of the history: its window and step, the percentiles of merged histograms, and
// how the proxy's answers count as traffic.

const NOW = new Date("2026-11-28T12:00:30Z");
const DAY = 86_400_000;

describe("a history window", () => {
  it("defaults to the last hour at 60 s", () => {
    expect(historyWindow({}, 7, NOW)).toEqual({ from: new Date(NOW.getTime() - 3_600_000), to: NOW, stepS: 60 });
  });

  it("takes the smallest multiple of 60 s that gives at most 1,440 points", () => {
    expect(historyWindow({ from: new Date(NOW.getTime() - DAY) }, 7, NOW).stepS).toBe(60);
    expect(historyWindow({ from: new Date(NOW.getTime() - DAY - 60_000) }, 7, NOW).stepS).toBe(120);
    expect(historyWindow({ from: new Date(NOW.getTime() - 7 * DAY) }, 7, NOW).stepS).toBe(420);
  });

  it("ends at now at the latest", () => {
    expect(historyWindow({ to: new Date(NOW.getTime() + DAY) }, 7, NOW).to).toEqual(NOW);
  });

  it.each([
    [{ from: new Date(NOW.getTime() - 1000), to: new Date(NOW.getTime() - 2000) }, "to"],
    [{ from: new Date(NOW.getTime() - 30 * DAY - 600_000) }, "from"],
    [{ stepS: 61 }, "step_s"],
    [{ stepS: -60 }, "step_s"],
    [{ from: new Date(NOW.getTime() - 30 * DAY), stepS: 60 }, "step_s"],
  ])("refuses %o naming %s", (req, field) => {
    expect(() => historyWindow(req, 30, NOW)).toThrow(expect.objectContaining({ extra: { field } }));
  });

  it("lets a browser whose clock runs a minute behind ask for the whole history", () => {
    expect(historyWindow({ from: new Date(NOW.getTime() - 7 * DAY - 60_000), stepS: 420 }, 7, NOW).stepS).toBe(420);
  });
});

describe("first-byte percentiles from buckets", () => {
  const buckets = (at: Record<number, number>) => Array.from({ length: FIRST_BYTE_BOUNDS_MS.length + 1 }, (_, i) => at[i] ?? 0);

  it("interpolates within the bucket that holds the rank", () => {
    // 100 answers: 50 within (10, 25] ms, 50 within (100, 250] ms.
    const merged = buckets({ 4: 50, 7: 50 });
    expect(firstByteQuantile(merged, 0.5)).toBe(25);
    expect(firstByteQuantile(merged, 0.99)).toBeCloseTo(100 + 150 * (49 / 50));
  });

  it("answers the last bound for answers slower than it, and nothing without answers", () => {
    expect(firstByteQuantile(buckets({ 17: 3 }), 0.5)).toBe(300_000);
    expect(firstByteQuantile(buckets({}), 0.5)).toBeUndefined();
  });
});

describe("the proxy's traffic", () => {
  const calls: string[] = [];
  const metrics: ProxyMetrics = {
    answered: (e, code) => calls.push(`answered ${e} ${code}`),
    firstByte: (e, s) => calls.push(`firstByte ${e} ${s}`),
    retried: (e) => calls.push(`retried ${e}`),
    held: (e, s) => calls.push(`held ${e} ${s}`),
    refused: (e, reason) => calls.push(`refused ${e} ${reason}`),
    resumed: (e, s) => calls.push(`resumed ${e} ${s}`),
    streamCut: (e, reason) => calls.push(`cut ${e} ${reason}`),
    prefixRouted: (e, outcome) => calls.push(`prefix ${e} ${outcome}`),
  };

  it("counts each answer by its status class and each wait as held, beside the metrics", () => {
    let now = Date.parse("2026-11-28T12:00:10Z");
    const traffic = createProxyTraffic(() => now);
    const counted = withTraffic(metrics, traffic);
    for (const code of [200, 201, 404, 499, 502, 503]) counted.answered("chat", code);
    counted.held("chat", 2);
    counted.firstByte("chat", 0.03);
    counted.retried("chat");
    now += 60_000;
    counted.answered("chat", 200);
    expect(calls).toHaveLength(10);
    const [first, second] = traffic.changedSince(0);
    expect(first!.counts).toEqual({ ok: 2, clientError: 2, serverError: 2, held: 1, continued: 0, cut: 0 });
    expect(first!.firstByte[FIRST_BYTE_BOUNDS_MS.indexOf(50)]).toBe(1);
    expect(second!.minute).toEqual(new Date("2026-11-28T12:01:00Z"));
    expect(second!.counts.ok).toBe(1);
    // Only the minute changed since is published again; minutes past their keeping are forgotten.
    expect(traffic.changedSince(now).map((e) => e.minute)).toEqual([new Date("2026-11-28T12:01:00Z")]);
    now += 10 * 60_000;
    expect(traffic.changedSince(0)).toEqual([]);
    // Counted again later, and for two endpoints in turn: each in its own new minute.
    counted.answered("chat", 200);
    counted.answered("code", 500);
    counted.answered("chat", 200);
    expect(traffic.changedSince(0).map((e) => [e.endpointName, e.minute, e.counts.ok, e.counts.serverError])).toEqual([
      ["chat", new Date("2026-11-28T12:11:00Z"), 2, 0],
      ["code", new Date("2026-11-28T12:11:00Z"), 0, 1],
    ]);
  });
});

import { describe, expect, it } from "vitest";
import { backToFullStrength, daysOf, ONE_MARKET_DAY, TWO_MARKET_DAY, type StrengthSample } from "../../bench/serving/parts/serve-markets.js";

// bench:serve's recovery figure (pure): the time from an event to full strength again after the
// shortfall it caused, and the choice of days.

const H = 3_600;
/** Samples every simulated minute from `fromS`, ready as `ready(minute)` against a target of 4. */
const samples = (fromS: number, minutes: number, ready: (minute: number) => number): StrengthSample[] =>
  Array.from({ length: minutes }, (_, m) => ({ simS: fromS + m * 60, target: 4, ready: ready(m) }));

describe("backToFullStrength", () => {
  it("times the first shortfall after the event to its end", () => {
    const day = samples(13 * H, 120, (m) => (m < 60 ? 4 : m < 65 ? 4 : m < 72 ? 1 : 4));
    expect(backToFullStrength(day, 14 * H)).toBe(12 * 60);
  });

  it("answers full throughout when no shortfall begins within an hour of the event", () => {
    expect(backToFullStrength(samples(14 * H, 180, () => 4), 14 * H)).toBe("full throughout");
    expect(backToFullStrength(samples(14 * H, 180, (m) => (m === 90 ? 2 : 4)), 14 * H)).toBe("full throughout");
  });

  it("answers short at 24:00 when the shortfall outlasts the day, samples after 24:00 left out", () => {
    const late = samples(23 * H, 180, (m) => (m < 10 ? 4 : m < 150 ? 0 : 4));
    expect(backToFullStrength(late, 23 * H)).toBe("short at 24:00");
  });
});

describe("daysOf", () => {
  it("runs one market, then two, by default, and refuses other names", () => {
    expect(daysOf(undefined)).toEqual([ONE_MARKET_DAY, TWO_MARKET_DAY]);
    expect(daysOf("two")).toEqual([TWO_MARKET_DAY]);
    expect(() => daysOf("three")).toThrow(/BENCH_SERVE_DAYS/);
    expect(() => daysOf("two,two")).toThrow(/BENCH_SERVE_DAYS/);
  });
});

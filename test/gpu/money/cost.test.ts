import { describe, expect, it } from "vitest";
import { costFigures, formatUptime, uptimeMs } from "../../../src/gpu/money/cost.js";

describe("formatUptime", () => {
  it.each([
    [0, "0:00:00"],
    [59_999, "0:00:59"],
    [(3600 + 2 * 60 + 3) * 1000, "1:02:03"],
    [(26 * 3600 + 3 * 60 + 4) * 1000, "26:03:04"],
    [(250 * 3600) * 1000, "250:00:00"],
  ])("formats %i ms as %s", (ms, text) => {
    expect(formatUptime(ms)).toBe(text);
  });
});

describe("uptimeMs", () => {
  const created = new Date("2026-11-20T00:00:00Z");
  it("runs to destroyed_at when set, else to now, and never below zero", () => {
    expect(uptimeMs(created, new Date("2026-11-20T02:00:00Z"), new Date("2026-11-21T00:00:00Z"))).toBe(2 * 3_600_000);
    expect(uptimeMs(created, null, new Date("2026-11-20T05:00:00Z"))).toBe(5 * 3_600_000);
    expect(uptimeMs(created, null, new Date("2026-11-19T00:00:00Z"))).toBe(0);
  });
});

describe("costFigures", () => {
  it("keeps the relations of the contract with money to 4 decimals and days to 1", () => {
    const figures = costFigures(0.4567, 30 * 3_600_000 + 1_800_000);
    expect(figures).toEqual({
      costPerHour: 0.4567,
      uptimeHours: 30.5,
      totalCost: 13.9294,
      hourlyRate: 0.4567,
      uptimeDays: 1.3,
      estimatedDailyCost: 10.9608,
      estimatedMonthlyCost: 328.824,
    });
  });
});

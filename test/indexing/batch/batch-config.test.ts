import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config.js";

describe("batch and cron configuration", () => {
  it("defaults to the batch_log index, the batch at 01:00 and incremental every 30 minutes", () => {
    expect(loadConfig({}).batch).toEqual({
      logIndex: "batch_log",
      cronEnabled: true,
      cronBatch: "0 1 * * *",
      cronIncremental: "*/30 * * * *",
      cronIncrementalMinutes: 30,
      cronIncrementalOverlapMinutes: 5,
    });
  });

  it("takes cron expressions, off and CRON_ENABLED from the environment", () => {
    const batch = loadConfig({ CRON_ENABLED: "false", CRON_BATCH: "off", CRON_INCREMENTAL: "0 */15 * * * *", CRON_INCREMENTAL_MINUTES: "15", CRON_INCREMENTAL_OVERLAP_MINUTES: "0" }).batch;
    expect(batch).toMatchObject({ cronEnabled: false, cronBatch: "off", cronIncremental: "0 */15 * * * *", cronIncrementalMinutes: 15, cronIncrementalOverlapMinutes: 0 });
  });

  it.each([
    ["CRON_BATCH", "at one o'clock"],
    ["CRON_INCREMENTAL", "*/30 * * *"],
    ["CRON_ENABLED", "yes"],
    ["CRON_INCREMENTAL_MINUTES", "1"],
    ["CRON_INCREMENTAL_OVERLAP_MINUTES", "-1"],
    ["BATCH_LOG_INDEX", "Batch/Log"],
  ])("refuses a bad %s naming it", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  });
});

import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";

describe("indexing configuration", () => {
  it("defaults to one fetch per bulk, the seed's bulk sizes and the goods_ko index", () => {
    expect(loadConfig({}).indexing).toEqual({
      goodsIndex: "goods_ko",
      fetchSize: 3_000,
      bulkSize: 3_000,
      bulkMaxBytes: 10 * 1024 * 1024,
      bulksInFlight: 2,
      channelCapacity: 0,
      goodsAnalyzer: "cjk",
      live: true,
    });
  });

  it("reads every setting from its variable", () => {
    const config = loadConfig({
      GOODS_INDEX: "goods_en",
      INDEX_FETCH_SIZE: "1000",
      INDEX_BULK_SIZE: "500",
      INDEX_BULK_MAX_BYTES: "65536",
      INDEX_BULKS_IN_FLIGHT: "4",
      INDEX_CHANNEL_CAPACITY: "2000",
      GOODS_ANALYZER: "nori",
      INDEX_LIVE: "false",
    });
    expect(config.indexing).toEqual({
      goodsIndex: "goods_en",
      fetchSize: 1000,
      bulkSize: 500,
      bulkMaxBytes: 65536,
      bulksInFlight: 4,
      channelCapacity: 2000,
      goodsAnalyzer: "nori",
      live: false,
    });
  });

  it.each([
    ["GOODS_INDEX", "Goods*"],
    ["INDEX_FETCH_SIZE", "0"],
    ["INDEX_BULK_SIZE", "lots"],
    ["INDEX_BULKS_IN_FLIGHT", "17"],
    ["INDEX_CHANNEL_CAPACITY", "-1"],
    ["GOODS_ANALYZER", "korean"],
  ])("refuses %s=%s naming the variable", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  });
});

import { describe, expect, it } from "vitest";
import { parseCustomConfig } from "../../src/gpu/custom-config.js";
import { normalizeGpuName } from "../../src/gpu/offers.js";
import { decodePageToken, encodePageToken } from "../../src/gpu/page-token.js";
import { storedStatusOf } from "../../src/gpu/status.js";
import { InvalidInputError } from "../../src/errors.js";

describe("storedStatusOf", () => {
  it.each([
    ["creating", false, "creating"],
    ["loading", true, "loading"],
    ["running", false, "running"],
    ["running", true, "running_llm"],
    ["exited", true, "exited"],
    ["offline", false, "exited"],
  ] as const)("maps marketplace %s (probe answered: %s) to %s", (market, answered, stored) => {
    expect(storedStatusOf(market, answered)).toBe(stored);
  });
});

describe("normalizeGpuName", () => {
  it("drops case, spaces, '_' and '-'", () => {
    expect(["RTX 4090", "rtx_4090", "Rtx-4090", " rtx  4090 "].map(normalizeGpuName)).toEqual(Array(4).fill("rtx4090"));
  });
});

describe("parseCustomConfig", () => {
  it("accepts the three keys", () => {
    expect(parseCustomConfig({ llm_max_model_len: 2048, llm_gpu_memory_utilization: 1, auto_destroy: true }, true)).toEqual({
      llmMaxModelLen: 2048,
      llmGpuMemoryUtilization: 1,
      autoDestroy: true,
    });
  });

  it("refuses model-server keys without a template, and unknown keys anywhere", () => {
    expect(() => parseCustomConfig({ llm_max_model_len: 2048 }, false)).toThrow(InvalidInputError);
    expect(parseCustomConfig({ auto_destroy: false }, false)).toEqual({ autoDestroy: false });
    expect(() => parseCustomConfig({ gpu: 1 }, true)).toThrow(/unknown key 'gpu'.*accepted keys/);
  });
});

describe("page tokens", () => {
  const token = { sortBy: "uptime" as const, statusFilter: "running", asOf: "2026-11-21T00:00:00.000Z", after: ["123", "gpu-1"] as [string, string] };

  it("round-trip for the listing that issued them", () => {
    expect(decodePageToken(encodePageToken(token), "uptime", "running")).toEqual(token);
  });

  it("are refused for another sort key or filter, and when not issued here", () => {
    expect(() => decodePageToken(encodePageToken(token), "created_at", "running")).toThrow(/another sort_by/);
    expect(() => decodePageToken(encodePageToken(token), "uptime", "")).toThrow(InvalidInputError);
    expect(() => decodePageToken("%%%", "uptime", "running")).toThrow(/not a token/);
    expect(() => decodePageToken(Buffer.from("[2]").toString("base64url"), "uptime", "running")).toThrow(/not a token/);
  });
});

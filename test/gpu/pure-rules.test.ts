import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { TemplateSchema } from "../../gen/gpu/v1/gpu_service_pb.js";
import { parseCustomConfig } from "../../src/gpu/creation/custom-config.js";
import type { InstanceRecord } from "../../src/gpu/store/instance-store.js";
import { limitsFor, reachedLimit } from "../../src/gpu/money/limits.js";
import { normalizeGpuName } from "../../src/gpu/marketplace/offers.js";
import { decodePageToken, encodePageToken } from "../../src/gpu/store/page-token.js";
import { storedStatusOf } from "../../src/gpu/store/status.js";
import { InvalidInputError } from "../../src/errors.js";

describe("limitsFor and reachedLimit", () => {
  const template = create(TemplateSchema, { name: "capped", config: { maxHours: 8, maxCost: 3 } });
  const record = (maxHours: number | null, maxCost: number | null) =>
    ({ createdAt: new Date(Date.UTC(2026, 0, 1)), destroyedAt: null, costPerHour: 0.5, maxHours, maxCost }) as InstanceRecord;
  const at = (hours: number) => new Date(Date.UTC(2026, 0, 1) + hours * 3_600_000);

  it("takes custom_config over the template's defaults, and no limit when neither sets one", () => {
    expect(limitsFor(template, { maxHours: 2 })).toEqual({ maxHours: 2, maxCost: 3 });
    expect(limitsFor(template, {})).toEqual({ maxHours: 8, maxCost: 3 });
    expect(limitsFor(undefined, {})).toEqual({ maxHours: null, maxCost: null });
  });

  it("names the limit reached first, and none before", () => {
    expect(reachedLimit(record(2, null), at(1.99))).toBeUndefined();
    expect(reachedLimit(record(2, null), at(2))).toMatchObject({ limit: "max_hours" });
    expect(reachedLimit(record(null, 1), at(1.9))).toBeUndefined();
    expect(reachedLimit(record(null, 1), at(2))).toMatchObject({ limit: "max_cost", reason: "max_cost reached: cost $1 of $1" });
  });
});

describe("storedStatusOf", () => {
  it.each([
    ["creating", false, "creating"],
    ["loading", true, "loading"],
    ["running", false, "running"],
    ["running", true, "running_llm"],
    ["exited", true, "exited"],
  ] as const)("maps marketplace %s (probe answered: %s) to %s", (market, answered, stored) => {
    expect(storedStatusOf(market, answered, "running")).toBe(stored);
  });

  it.each([
    ["running_llm", "running"],
    ["running", "running"],
    ["loading", "loading"],
    ["creating", "creating"],
    ["exited", "exited"],
  ] as const)("keeps %s through a host that is offline for a while (transient), as %s", (current, stored) => {
    expect(storedStatusOf("offline", false, current)).toBe(stored);
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

  it("accepts the limits max_hours and max_cost, with or without a template", () => {
    expect(parseCustomConfig({ max_hours: 0.5, max_cost: 12 }, true)).toEqual({ maxHours: 0.5, maxCost: 12 });
    expect(parseCustomConfig({ max_hours: 2 }, false)).toEqual({ maxHours: 2 });
  });

  it.each([[{ max_hours: 0 }], [{ max_hours: -1 }], [{ max_cost: "5" }], [{ max_cost: null }], [{ max_hours: true }]])(
    "refuses the limit %j naming the accepted keys",
    (json) => {
      expect(() => parseCustomConfig(json, true)).toThrow(/must be a number > 0.*max_hours \(number > 0\), max_cost/);
    },
  );

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

import { describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { CUSTOM_CONFIG_SCHEMA } from "../../src/gpu/api-hints.js";
import { CUSTOM_CONFIG_KEYS } from "../../src/gpu/creation/custom-config.js";
import type { ApiHints } from "../../src/server/openapi/api-hints.js";
import { createOpenApiDocument } from "../../src/server/openapi/openapi-document.js";
import { loadProtoComments } from "../../src/server/openapi/proto-comments.js";

const comments = loadProtoComments();
const build = (hints: ApiHints) =>
  createOpenApiDocument({ services: [GpuService], comments, hints, authEnabled: false, title: "t", version: "1" });

describe("proto comments", () => {
  it("come from the generated descriptor set, for services, methods, messages and fields", () => {
    expect(comments.get("gpu.v1.GpuService.ListTemplates")).toBe("All templates, in the order high_performance, budget, research.");
    expect(comments.get("gpu.v1.Offer")).toBe("A rentable machine offered by the marketplace.");
    expect(comments.get("gpu.v1.Offer.dph_total")).toBe("Total price per hour, in dollars.");
    // Lines wrapped in the proto file are joined into one paragraph.
    expect(comments.get("gpu.v1.GpuService")).toMatch(/^GpuService rents GPU cloud instances that run LLM model servers: it searches marketplace offers, keeps/);
  });
});

describe("API hints", () => {
  it("document exactly the custom_config keys the service accepts", () => {
    expect(Object.keys(CUSTOM_CONFIG_SCHEMA.properties as object).sort()).toEqual([...CUSTOM_CONFIG_KEYS].sort());
  });

  it("must name fields and methods that exist, so they cannot outlive what they describe", () => {
    expect(() => build({ fields: { "gpu.v1.SearchOffersRequest.limt": { minimum: 1 } } })).toThrow(/gpu.v1.SearchOffersRequest.limt/);
    expect(() => build({ requiredParams: ["gpu.v1.Nope.x"] })).toThrow(/gpu.v1.Nope.x/);
    expect(() => build({ errors: { "gpu.v1.GpuService.Nope": [409] } })).toThrow(/gpu.v1.GpuService.Nope/);
  });

  it("merge into the field's schema and its query parameter", () => {
    const doc = build({ fields: { "gpu.v1.ListInstancesRequest.limit": { minimum: 1, maximum: 7 } } }) as {
      paths: Record<string, Record<string, { parameters: Array<{ name: string }> }>>;
    };
    const limit = doc.paths["/api/gpu/instances"]!.get!.parameters.find((p) => p.name === "limit");
    expect(limit).toEqual({
      name: "limit",
      in: "query",
      required: false,
      description: "1..1000, default 100.",
      schema: { type: "integer", format: "int32", minimum: 1, maximum: 7 },
    });
  });
});

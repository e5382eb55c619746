import { describe, expect, it } from "vitest";
import { GpuService } from "../../../gen/gpu/v1/gpu_service_pb.js";
import { IndexingService } from "../../../gen/search/v1/indexing_service_pb.js";
import { InvalidInputError } from "../../../src/errors.js";
import { matchRoute, restRoutesOf } from "../../../src/server/rest/http-rules.js";
import { requestJsonOf } from "../../../src/server/rest/request-json.js";

const routes = restRoutesOf([GpuService, IndexingService]);

function build(verb: string, pathAndQuery: string, body?: unknown) {
  const url = new URL(pathAndQuery, "http://x");
  const { match } = matchRoute(routes, verb, url.pathname);
  if (!match) throw new Error(`no route for ${verb} ${url.pathname}`);
  return { rpc: match.route.method.name, json: requestJsonOf(match, url.searchParams, body as never) };
}

function rejection(fn: () => unknown): InvalidInputError {
  try {
    fn();
  } catch (err) {
    if (err instanceof InvalidInputError) return err;
    throw err;
  }
  throw new Error("expected an InvalidInputError");
}

describe("REST routes from google.api.http annotations", () => {
  it("derives a route for every annotated RPC of both services", () => {
    const names = routes.map((r) => `${r.verb} ${r.pattern}`);
    expect(names).toHaveLength(GpuService.methods.length + IndexingService.methods.length);
    expect(names).toContain("DELETE /api/gpu/instances/{instance_id}");
    expect(names).toContain("POST /api/search/v1/batch/product");
  });

  it("prefers literal segments over path variables", () => {
    expect(build("POST", "/api/gpu/instances/from-template?template_name=budget").rpc).toBe("CreateInstanceFromTemplate");
    expect(build("GET", "/api/gpu/instances/gpu-7/enhanced").rpc).toBe("GetInstanceEnhanced");
    expect(build("GET", "/api/gpu/instances/gpu-7").json).toEqual({ instance_id: "gpu-7" });
  });

  it("reports the allowed verbs when only the verb is wrong", () => {
    expect(matchRoute(routes, "PUT", "/api/gpu/instances/gpu-1").allowed.sort()).toEqual(["DELETE", "GET"]);
    expect(matchRoute(routes, "GET", "/api/nothing").allowed).toEqual([]);
  });
});

describe("request JSON from path, query and body", () => {
  it("converts query values by field type", () => {
    expect(build("GET", "/api/gpu/offers?max_price=.5").json).toEqual({ max_price: 0.5 });
    expect(build("GET", "/api/gpu/offers?max_price=2e-1").json).toEqual({ max_price: 0.2 });
    expect(build("GET", "/api/gpu/offers?gpu_name=RTX%204090&max_price=1.5&rentable=true").json).toEqual({
      gpu_name: "RTX 4090",
      max_price: 1.5,
      rentable: true,
    });
    expect(build("GET", "/api/gpu/instances?limit=20&sort_by=uptime").json).toEqual({ limit: 20, sort_by: "uptime" });
  });

  it("accepts the JSON (camelCase) name of a query parameter too", () => {
    expect(build("GET", "/api/gpu/instances?statusFilter=running").json).toEqual({ status_filter: "running" });
  });

  it("keeps string parameters as given, including empty ones", () => {
    expect(build("GET", "/api/search/v1/index/db/goods?interval=").json).toEqual({ interval: "" });
    expect(build("GET", "/api/search/v1/index/db/goods?interval=2.5").json).toEqual({ interval: "2.5" });
  });

  it("treats an empty non-string parameter as not given", () => {
    expect(build("POST", "/api/search/v1/batch/product?interval_minutes=").json).toEqual({});
  });

  it.each([
    ["/api/gpu/offers?max_price=abc", "max_price", /finite decimal number/],
    ["/api/gpu/offers?max_price=Infinity", "max_price", /finite decimal number/],
    ["/api/gpu/offers?max_price=0x10", "max_price", /finite decimal number/],
    ["/api/gpu/offers?max_price=%205", "max_price", /finite decimal number/],
    ["/api/gpu/offers?max_price=1e999", "max_price", /finite decimal number/],
    ["/api/gpu/offers?rentable=yes", "rentable", /true or false/],
    ["/api/gpu/instances?limit=2.5", "limit", /integer/],
    ["/api/gpu/instances?limit=99999999999", "limit", /from -2147483648 to 2147483647/],
    ["/api/search/v1/batch/product?chunk_size=abc", "chunk_size", /integer/],
    ["/api/gpu/instances?limit=1&limit=2", "limit", /more than once/],
    ["/api/gpu/offers?unknown=1", "unknown", /unknown query parameter/],
  ])("rejects %s naming %s", (path, field, message) => {
    const verb = path.includes("batch") ? "POST" : "GET";
    const err = rejection(() => build(verb, path));
    expect(err.extra).toEqual({ field });
    expect(err.message).toMatch(message);
  });

  it("does not let a query parameter override a path parameter", () => {
    expect(rejection(() => build("GET", "/api/gpu/instances/gpu-1?instance_id=gpu-2")).message).toMatch(/instance_id/);
  });

  it("binds body '*' to the whole request and a named body to its field", () => {
    expect(build("POST", "/api/gpu/search-offers", { sort_by: "price", limit: 5 }).json).toEqual({ sort_by: "price", limit: 5 });
    expect(
      build("POST", "/api/gpu/instances/from-template?template_name=budget", { custom_config: { auto_destroy: true } }).json,
    ).toEqual({ template_name: "budget", body: { custom_config: { auto_destroy: true } } });
  });

  it.each([
    ["a top-level key of body '*'", "/api/gpu/search-offers", { max_price: 2, maxprice: 3 }, "maxprice", /accepted keys: .*max_price/],
    ["a key of a named body", "/api/gpu/instances/from-template?template_name=budget", { custom_confg: {} }, "custom_confg", /accepted keys: custom_config/],
  ])("rejects an unknown field in %s, naming it and the accepted keys", (_what, path, body, field, accepted) => {
    const err = rejection(() => build("POST", path, body));
    expect(err.extra).toEqual({ field });
    expect(err.message).toMatch(new RegExp(`^unknown field '${field.replace(".", "\\.")}' in the request body`));
    expect(err.message).toMatch(accepted);
  });

  it("rejects a body '*' that is not a JSON object", () => {
    for (const body of [[1, 2], "text", 42, null]) {
      expect(rejection(() => build("POST", "/api/gpu/search-offers", body)).message).toMatch(/JSON object/);
    }
  });
});

describe("PATCH bodies and their update mask", () => {
  it("names the body's keys in update_mask, null ones included, but not the path's", () => {
    expect(build("PATCH", "/api/gpu/endpoints/chat", { autoscale: null }).json).toEqual({ autoscale: null, name: "chat", update_mask: "autoscale" });
    expect(build("PATCH", "/api/gpu/endpoints/chat", { replicas: 2, maxCostPerHour: 1, max_cost_per_hour: 1, name: "other" }).json).toMatchObject({
      name: "chat",
      update_mask: "replicas,maxCostPerHour",
    });
  });

  it("keeps a mask the body gives, and adds none to an empty body or another verb", () => {
    expect(build("PATCH", "/api/gpu/endpoints/chat", { updateMask: "replicas", replicas: 1 }).json).toEqual({ updateMask: "replicas", replicas: 1, name: "chat" });
    expect(build("PATCH", "/api/gpu/endpoints/chat", {}).json).toEqual({ name: "chat" });
    expect(build("POST", "/api/gpu/endpoints", { name: "x", autoscale: null }).json).toEqual({ name: "x", autoscale: null });
  });
});

import { join } from "node:path";
import { Validator } from "@seriousme/openapi-schema-validator";
import type { JsonObject } from "@bufbuild/protobuf";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { IndexingService } from "../../gen/search/v1/indexing_service_pb.js";
import { restRoutesOf } from "../../src/server/rest/http-rules.js";
import { createTestElasticsearch } from "../support/elasticsearch.js";
import { readmeExamples, type ReadmeExample } from "../support/readme-examples.js";
import { startTestServer, useTestServer, type TestServer } from "../support/server.js";

interface Operation {
  parameters?: Array<{ name: string; in: string; required: boolean; schema: JsonObject; description?: string }>;
  requestBody?: { content: { "application/json": { schema: JsonObject } } };
  responses: Record<string, { $ref?: string; content?: { "application/json": { schema: JsonObject } } }>;
}
interface Document {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, JsonObject & { properties?: Record<string, JsonObject>; required?: string[] }> };
  security?: unknown;
}

const t = useTestServer();
let doc: Document;

beforeAll(async () => {
  const res = await fetch(`${t.server.url}/openapi.json`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  doc = (await res.json()) as Document;
});

const operations = () =>
  Object.entries(doc.paths).flatMap(([path, item]) => Object.entries(item).map(([verb, op]) => ({ path, verb: verb.toUpperCase(), op })));

describe("GET /openapi.json", () => {
  it("is a valid OpenAPI 3.1 document", async () => {
    const validator = new Validator();
    const result = await validator.validate(doc as unknown as Record<string, unknown>);
    expect(result.errors).toBeUndefined();
    expect(result.valid).toBe(true);
    expect(validator.version).toBe("3.1");
  });

  it("documents exactly the routes of the REST router", () => {
    const served = restRoutesOf([GpuService, IndexingService]).map((r) => `${r.verb} ${r.pattern}`);
    expect(operations().map((o) => `${o.verb} ${o.path}`).sort()).toEqual(served.sort());
    expect(served.length).toBeGreaterThanOrEqual(16);
  });

  it("documents only routes the server answers: each one reaches its parameter check", async () => {
    for (const { path, verb } of operations()) {
      const url = `${t.server.url}${path.replace(/\{[a-z_]+\}/g, "x")}?not_a_parameter=1`;
      const res = await fetch(url, { method: verb });
      expect({ route: `${verb} ${path}`, status: res.status, body: await res.json() }).toEqual({
        route: `${verb} ${path}`,
        status: 400,
        body: { detail: "unknown query parameter 'not_a_parameter'", field: "not_a_parameter" },
      });
    }
  });

  it("uses the proto field names, comments and the bounds the code enforces", () => {
    const schemas = doc.components.schemas;
    for (const [name, schema] of Object.entries(schemas)) {
      for (const property of Object.keys(schema.properties ?? {})) expect(`${name}.${property}`).toMatch(/\.[a-z][a-z0-9_]*$/);
    }
    expect(schemas["gpu.v1.Offer"]!.properties!.gpu_ram).toMatchObject({ type: "number", description: "GPU memory per GPU, in GB." });
    expect(schemas["gpu.v1.SearchOffersRequest"]!.properties!.limit).toMatchObject({ type: "integer", minimum: 1, maximum: 1000, default: 100 });
    expect(schemas["gpu.v1.SearchOffersRequest"]!.properties!.sort_by).toMatchObject({ enum: ["price", "gpu_ram", "num_gpus", "price_per_gpu"] });
    expect(schemas["gpu.v1.Instance"]!.properties!.created_at).toMatchObject({ type: "string", format: "date-time" });
    expect(schemas["gpu.v1.ListOffersResponse"]!.required).toEqual(["offers", "total", "filtered_count", "markets"]);
    const list = doc.paths["/api/gpu/instances"]!.get!;
    expect(list.parameters!.map((p) => p.name)).toEqual(["status_filter", "sort_by", "limit", "page_token"]);
    expect(list.parameters![0]!.schema).toMatchObject({ enum: expect.arrayContaining(["running_llm", "destroyed"]) });
    const fromTemplate = doc.paths["/api/gpu/instances/from-template"]!.post!;
    expect(fromTemplate.parameters!.map((p) => [p.name, p.in, p.required])).toEqual([
      ["template_name", "query", true],
      ["offer_id", "query", false],
    ]);
    expect(fromTemplate.requestBody!.content["application/json"].schema).toMatchObject({ $ref: "#/components/schemas/gpu.v1.FromTemplateBody" });
  });

  it("documents endpoint autoscaling: its bounds and defaults, the update mask, null to turn it off", () => {
    const schemas = doc.components.schemas;
    expect(schemas["gpu.v1.EndpointAutoscale"]!.properties).toMatchObject({
      min_replicas: { type: "integer", minimum: 0, maximum: 16 },
      max_replicas: { type: "integer", minimum: 1, maximum: 16 },
      target_in_flight: { minimum: 1, maximum: 1000, default: 4 },
      scale_up_after_s: { minimum: 0, maximum: 3600, default: 30 },
      scale_down_after_s: { minimum: 30, maximum: 86400, default: 600 },
    });
    const ref = { $ref: "#/components/schemas/gpu.v1.EndpointAutoscale" };
    expect(schemas["gpu.v1.CreateEndpointRequest"]!.properties!.autoscale).toMatchObject(ref);
    expect(schemas["gpu.v1.Endpoint"]!.properties!.autoscale).toMatchObject(ref);
    expect(schemas["gpu.v1.Endpoint"]!.properties!.state).toMatchObject({ enum: expect.arrayContaining(["parked", "idle"]) });
    const body = doc.paths["/api/gpu/endpoints/{name}"]!.patch!.requestBody!.content["application/json"].schema;
    const update = body.properties as Record<string, JsonObject>;
    expect(update.autoscale).toMatchObject({ anyOf: [ref, { type: "null" }], description: expect.stringContaining("autoscaling on") });
    expect(update.update_mask).toMatchObject({ type: "string" });
    expectValid(body, { autoscale: null }, "autoscale off");
    expectValid(body, { autoscale: { min_replicas: 0, max_replicas: 2 } }, "autoscale on");
    expect(() => expectValid(body, { autoscale: { min_replicas: 0, max_replicas: 17 } }, "misfit")).toThrow();
  });

  it("documents endpoint capacity: its bounds and defaults, null to reset it, the kind of each replica and the counts", () => {
    const schemas = doc.components.schemas;
    expect(schemas["gpu.v1.EndpointCapacity"]!.properties).toMatchObject({
      interruptible: { type: "boolean", default: false },
      on_demand_base: { type: "integer", minimum: 0, maximum: 16, default: 0 },
      fallback: { type: "boolean", default: true },
      bid_margin: { type: "number", minimum: 0, maximum: 1, default: 0.25 },
    });
    const ref = { $ref: "#/components/schemas/gpu.v1.EndpointCapacity" };
    expect(schemas["gpu.v1.CreateEndpointRequest"]!.properties!.capacity).toMatchObject(ref);
    expect(schemas["gpu.v1.Endpoint"]!.properties!.capacity).toMatchObject(ref);
    expect(schemas["gpu.v1.Endpoint"]!.properties).toMatchObject({ on_demand_replicas: { type: "integer" }, interruptible_replicas: { type: "integer" } });
    expect(schemas["gpu.v1.EndpointInstance"]!.properties!.interruptible).toMatchObject({ type: "boolean" });
    expect(schemas["gpu.v1.EndpointEvent"]!.properties!.kind).toMatchObject({ enum: expect.arrayContaining(["preempted", "fallback"]) });
    const body = doc.paths["/api/gpu/endpoints/{name}"]!.patch!.requestBody!.content["application/json"].schema;
    expect((body.properties as Record<string, JsonObject>).capacity).toMatchObject({ anyOf: [ref, { type: "null" }] });
    expectValid(body, { capacity: null }, "capacity reset");
    expectValid(body, { capacity: { interruptible: true, on_demand_base: 1 } }, "capacity on");
    expect(() => expectValid(body, { capacity: { bid_margin: 2 } }, "misfit")).toThrow();
  });

  it("gives every operation the {detail} error answers with their status codes", () => {
    for (const { path, op } of operations()) {
      for (const status of ["400", "500", "503"]) expect(op.responses[status]?.$ref).toBe(`#/components/responses/Error${status}`);
      if (path.includes("{")) expect(op.responses["404"]?.$ref).toBe("#/components/responses/Error404");
      expect("401" in op.responses).toBe(false);
    }
    expect(Object.keys(doc.paths["/api/gpu/instances"]!.post!.responses)).toEqual(["200", "400", "404", "409", "413", "429", "500", "503"]);
    expect(doc.components.schemas.Error).toMatchObject({ required: ["detail"] });
  });

  it("declares no security scheme while no token is configured (the docs page then shows no Authorize button)", () => {
    expect((doc as unknown as { components: { securitySchemes?: unknown } }).components.securitySchemes).toBeUndefined();
    expect(doc.security).toBeUndefined();
  });
});

describe("the README's examples", () => {
  const examples = readmeExamples(join(import.meta.dirname, "../../README.md")).filter((e) => e.path.startsWith("/api/"));

  it("are all found", () => {
    expect(examples.length).toBeGreaterThanOrEqual(15);
    expect(examples.filter((e) => e.response).length).toBeGreaterThanOrEqual(6);
  });

  it("call documented operations with documented parameters and bodies", () => {
    for (const example of examples) {
      const { op, pathParams } = operationFor(example);
      for (const [name, value] of [...example.query, ...pathParams]) {
        const parameter = op.parameters?.find((p) => p.name === name);
        expect(parameter, `${example.command}: parameter ${name}`).toBeDefined();
        expectValid(parameter!.schema, typed(value, parameter!.schema), `${example.command}: ${name}=${value}`);
      }
      for (const required of op.parameters?.filter((p) => p.required) ?? []) {
        expect(example.query.has(required.name) || pathParams.some(([n]) => n === required.name), `${example.command}: ${required.name}`).toBe(true);
      }
      if (example.body !== undefined) expectValid(op.requestBody!.content["application/json"].schema, example.body, example.command);
    }
  });

  it("are checked for real: a misfit fails validation", () => {
    const searchOffers = doc.paths["/api/gpu/search-offers"]!.post!.requestBody!.content["application/json"].schema;
    for (const body of [{ sort_by: "cheapest" }, { limit: 0 }, { limit: 1001 }, { maxPrice: 1 }, { num_gpus: 0 }]) {
      expect(() => expectValid(searchOffers, body, "misfit")).toThrow();
    }
    const answer = doc.paths["/api/gpu/templates"]!.get!.responses["200"]!.content!["application/json"].schema;
    expect(() => expectValid(answer, { templates: [{ name: 1 }] }, "misfit")).toThrow();
    expect(() => expectValid(answer, {}, "misfit")).toThrow();
  });

  it("show answers that fit the documented response schemas", () => {
    for (const example of examples.filter((e) => e.response)) {
      const { op } = operationFor(example);
      const { status, body, partial } = example.response!;
      const response = op.responses[String(status)];
      expect(response, `${example.command}: status ${status}`).toBeDefined();
      const schema = response!.content?.["application/json"].schema ?? { $ref: "#/components/schemas/Error" };
      expectValid(schema, body, example.command, partial);
    }
  });

  it("get answers from the server that fit the documented schemas (GPU examples, replayed)", async () => {
    // The tests before spend seconds in synchronous schema checks, past the server's keep-alive
    // timeout: let its timer close the idle pooled connection before this test reuses the pool.
    await new Promise((resolve) => setTimeout(resolve, 100));
    let instanceId = "";
    for (const example of examples.filter((e) => e.path.startsWith("/api/gpu/"))) {
      const path = example.path.replace("gpu-1001", instanceId);
      const query = example.query.size > 0 ? `?${example.query}` : "";
      const res = await fetch(`${t.server.url}${path}${query}`, {
        method: example.method,
        body: example.body === undefined ? undefined : JSON.stringify(example.body),
      });
      const body = (await res.json()) as Record<string, unknown>;
      expect(res.status, `${example.command}: ${JSON.stringify(body)}`).toBe(example.response?.status ?? 200);
      if (path.endsWith("/from-template")) instanceId = String(body.instance_id);
      const schema = operationFor({ ...example, path }).op.responses[String(res.status)]!.content?.["application/json"].schema;
      expectValid(schema ?? { $ref: "#/components/schemas/Error" }, body, example.command);
    }
    expect(instanceId).toMatch(/^gpu-\d+$/);
  });
});

describe("auth of the API docs", () => {
  const TOKEN = "docs-test-token";
  let secured: TestServer;
  beforeAll(async () => {
    secured = await startTestServer({ knex: t.db.knex, elasticsearch: createTestElasticsearch(), env: { AUTH_TOKENS: TOKEN } });
  });
  afterAll(async () => {
    await secured?.close();
  });

  it("is the API's: with tokens configured, the docs need one too", async () => {
    for (const path of ["/openapi.json", "/docs", "/docs/swagger-ui-bundle.js"]) {
      expect((await fetch(`${secured.url}${path}`)).status).toBe(401);
      expect((await fetch(`${secured.url}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200);
    }
  });

  it("then requires the bearer scheme and documents the 401 answer", async () => {
    const res = await fetch(`${secured.url}/openapi.json`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const securedDoc = (await res.json()) as Document;
    expect(securedDoc.security).toEqual([{ bearer: [] }]);
    expect((securedDoc as unknown as { components: { securitySchemes: unknown } }).components.securitySchemes).toEqual({
      bearer: expect.objectContaining({ type: "http", scheme: "bearer" }),
    });
    expect(securedDoc.paths["/api/gpu/templates"]!.get!.responses["401"]).toEqual({ $ref: "#/components/responses/Error401" });
  });

  it("documents 403 on every route, and the scope each operation needs", async () => {
    const res = await fetch(`${secured.url}/openapi.json`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const securedDoc = (await res.json()) as Document;
    const operations = Object.values(securedDoc.paths).flatMap((item) => Object.values(item!) as Array<{ responses: Record<string, unknown>; security?: unknown }>);
    expect(operations.length).toBeGreaterThan(10);
    for (const op of operations) expect(op.responses["403"]).toEqual({ $ref: "#/components/responses/Error403" });
    const op = (path: string, verb: string) => (securedDoc.paths[path] as unknown as Record<string, { security: unknown }>)[verb]!;
    expect(op("/api/gpu/templates", "get").security).toEqual([{ bearer: ["gpu:read"] }]);
    expect(op("/api/gpu/instances", "post").security).toEqual([{ bearer: ["gpu:write"] }]);
    expect(op("/api/gpu/instances/{instance_id}/model-key", "get").security).toEqual([{ bearer: ["gpu:write"] }]);
    expect(op("/api/search/v1/batch/product", "post").security).toEqual([{ bearer: ["indexing:run"] }]);
  });
});

describe("GET /docs", () => {
  it("serves the page and the pinned swagger-ui-dist files, nothing else", async () => {
    const page = await fetch(`${t.server.url}/docs`);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    const html = await page.text();
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets.every((a) => a.startsWith("/docs/"))).toBe(true);
    for (const asset of assets) expect((await fetch(`${t.server.url}${asset}`)).status, asset).toBe(200);
    expect((await fetch(`${t.server.url}/docs/package.json`)).status).toBe(404);
    expect((await fetch(`${t.server.url}/docs/../package.json`)).status).toBe(404);
    expect((await fetch(`${t.server.url}/openapi.json`, { method: "POST" })).status).toBe(405);
  });
});

// Validation against the served document's schemas. `partial` drops `required` for answers the
// README shortened with "...".
function expectValid(schema: JsonObject, value: unknown, what: string, partial = false): void {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  const components = partial ? withoutRequired(doc.components) : doc.components;
  ajv.addSchema({ $id: "https://api.test/openapi.json", components });
  const validate = ajv.compile(JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"https://api.test/openapi.json#/components/')) as object);
  const ok = validate(value);
  expect(ok ? [] : validate.errors, `${what}: ${JSON.stringify(value)}`).toEqual([]);
}

function withoutRequired<T>(value: T): T {
  return JSON.parse(JSON.stringify(value), (key, v: unknown) => (key === "required" && Array.isArray(v) ? undefined : v)) as T;
}

function operationFor(example: Pick<ReadmeExample, "command" | "method" | "path">): { op: Operation; pathParams: Array<[string, string]> } {
  // Literal paths first, as the router tries them.
  const candidates = Object.keys(doc.paths).sort((a, b) => a.split("{").length - b.split("{").length);
  for (const pattern of candidates) {
    const names = [...pattern.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]!);
    const match = new RegExp(`^${pattern.replace(/\{[a-z_]+\}/g, "([^/]+)")}$`).exec(example.path);
    const op = doc.paths[pattern]![example.method.toLowerCase()];
    if (match && op) return { op, pathParams: names.map((n, i) => [n, match[i + 1]!]) };
  }
  throw new Error(`README example is not a documented operation: ${example.command}`);
}

/** A query or path value as the REST handler reads it, by the parameter's schema type. */
function typed(value: string, schema: JsonObject): unknown {
  if (schema.type === "integer" || schema.type === "number") return Number(value);
  if (schema.type === "boolean") return value === "true" ? true : value === "false" ? false : value;
  return value;
}

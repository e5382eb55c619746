import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTokenFile } from "../support/token-file.js";

// Property-based fuzzing of every REST route and the Connect endpoints with requests that are
// bad by construction: each carries at least one value the contract rejects. None may answer
// 5xx, crash the process, or change the database or the search engine. Run with auth off, with
// AUTH_TOKENS, and with an AUTH_TOKENS_FILE token of every scope (the bad input then reaches
// the validation behind auth) and of read scopes only (writes then stop at 403).

interface BadRequest {
  method: string;
  path: string;
  body?: string;
  headers?: Record<string, string>;
  /** Random bytes may form a valid request by chance: then only 5xx is a failure. */
  mayBeValid?: boolean;
}

let db: TestDatabase;
let server: TestServer;
/** The bearer token every request of the current setup carries; undefined with auth off. */
let token: string | undefined;
const es = createTestElasticsearch();
// Indices of their own: the run's other files write theirs on the same cluster meanwhile.
const goodsIndex = uniqueIndexName("fuzz_goods");
const logIndex = uniqueIndexName("fuzz_batch_log");
let tried = 0;
const tokenFile = createTokenFile([
  { name: "fuzz-admin", secret: "fuzz-admin-secret", scopes: ["gpu:read", "gpu:write", "endpoints:invoke", "indexing:read", "indexing:run", "ops:read"] },
  { name: "fuzz-reader", secret: "fuzz-reader-secret", scopes: ["gpu:read", "indexing:read"] },
]);

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  console.info(`fuzz: ${tried} bad requests tried`);
  await db?.drop();
  tokenFile.remove();
});

const SETUPS: Array<[string, Record<string, string>, string | undefined, number]> = [
  ["auth off", {}, undefined, 1],
  ["AUTH_TOKENS", { AUTH_TOKENS: "fuzz-env-token" }, "fuzz-env-token", 0.25],
  ["an AUTH_TOKENS_FILE token of every scope", { AUTH_TOKENS_FILE: tokenFile.path }, "fuzz-admin-secret", 0.5],
  ["an AUTH_TOKENS_FILE token of read scopes", { AUTH_TOKENS_FILE: tokenFile.path }, "fuzz-reader-secret", 0.25],
];

const q = (params: Record<string, string>) => new URLSearchParams(params).toString();
const json = (value: unknown) => JSON.stringify(value);

// Values the contract rejects, per parameter.
const badLimit = fc.constantFrom("0", "-1", "1001", "99999", "2147483648", "1.5", "ten", "NaN", "Infinity", "1e3", " 5");
const badMoney = fc.constantFrom("-1", "-0.01", "NaN", "Infinity", "-Infinity", "cheap", "1,5", "0x10");
const badInterval = fc.constantFrom("abc", "0", "-5", "2.5", "1.0", "1e3", "0x10", "+4", "３", "01", "99999999999999999999");
const badBool = fc.constantFrom("yes", "no", "1", "0", "TRUE ", "null");
const unknownName = fc.stringMatching(/^[a-z][a-z0-9_]{0,20}$/).filter((s) => !KNOWN_FIELDS.has(s));
const junk = fc.oneof(fc.string(), fc.string({ unit: "binary", maxLength: 30 }), fc.constantFrom("%", "../../etc/passwd", "' or 1=1 --", "\u0000"));
const KNOWN_FIELDS = new Set([
  "gpu_name", "max_price", "rentable", "min_gpu_ram", "num_gpus", "sort_by", "limit", "template_name", "offer_id",
  "custom_config", "status_filter", "page_token", "instance_id", "interval", "interval_minutes", "chunk_size", "body",
]);
const badCustomConfig = fc.oneof(
  fc.record({ unknown_key: fc.anything().filter((v) => v !== undefined) }),
  unknownName.map((k) => ({ [k]: 1 })),
  fc.constantFrom(
    { llm_max_model_len: 0 }, { llm_max_model_len: -1 }, { llm_max_model_len: 1.5 }, { llm_max_model_len: "4096" },
    { llm_gpu_memory_utilization: 0 }, { llm_gpu_memory_utilization: 1.01 }, { llm_gpu_memory_utilization: -0.5 },
    { llm_gpu_memory_utilization: "high" }, { auto_destroy: "yes" }, { auto_destroy: 1 }, { image_name: "x" },
    { max_hours: 0 }, { max_hours: -2 }, { max_hours: "8" }, { max_cost: 0 }, { max_cost: -0.01 }, { max_cost: null },
  ),
);
const missingId = fc.oneof(fc.constant("gpu-999999999"), fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/).map((s) => `x${s}`));
const pathJunk = fc.oneof(missingId, fc.string({ unit: "binary", minLength: 1, maxLength: 20 }).map(encodeURIComponent), fc.constantFrom("%ZZ", "%E0%A4%A", "%00", "..%2F..", "%2F"));

const restRequests: fc.Arbitrary<BadRequest> = fc.oneof(
  // GpuService
  fc.record({ max_price: badMoney }).map((p) => ({ method: "GET", path: `/api/gpu/offers?${q(p)}` })),
  fc.record({ rentable: badBool }).map((p) => ({ method: "GET", path: `/api/gpu/offers?${q(p)}` })),
  fc.oneof(
    fc.record({ limit: fc.constantFrom(0, -1, 1001, 1e6, 2 ** 31) }),
    fc.record({ max_price: fc.constantFrom(-1, -1e-9, "cheap") }),
    fc.record({ min_gpu_ram: fc.constantFrom(-1, -24, true) }),
    fc.record({ num_gpus: fc.constantFrom(0, -1, 2.5, "two") }),
    fc.record({ sort_by: fc.constantFrom("bogus", "price desc", "PRICE", "dph_total", "1", "price;drop table gpu_instances") }),
    fc.record({ rentable: fc.constantFrom("true", 1, null) }).filter((r) => r.rentable !== null),
    unknownName.map((k) => ({ [k]: 1 })),
  ).map((b) => ({ method: "POST", path: "/api/gpu/search-offers", body: json(b) })),
  pathJunk.map((name) => ({ method: "GET", path: `/api/gpu/templates/${name}` })),
  fc.oneof(
    fc.record({ template_name: fc.constantFrom("nope", "BUDGET", "budget ", "") }),
    fc.record({ template_name: fc.constantFrom("budget", "research", "high_performance"), offer_id: fc.constantFrom("no-such-offer", "0") }),
  ).map((p) => ({ method: "POST", path: `/api/gpu/instances/from-template?${q(p)}` })),
  fc.record({ template_name: fc.constantFrom("budget", "research"), cc: badCustomConfig }).map(({ template_name, cc }) => ({
    method: "POST",
    path: `/api/gpu/instances/from-template?${q({ template_name })}`,
    body: json({ custom_config: cc }),
  })),
  fc.oneof(
    fc.constant({}),
    fc.record({ template_name: fc.constantFrom("nope", "Budget") }),
    fc.record({ offer_id: fc.constantFrom("no-such-offer", "", "-1") }),
    fc.record({ template_name: fc.constant("budget"), custom_config: badCustomConfig }),
    fc.record({ offer_id: fc.constant(42) }),
    fc.record({ custom_config: fc.constant("auto_destroy") }),
  ).map((b) => ({ method: "POST", path: "/api/gpu/instances", body: json(b) })),
  fc.oneof(
    fc.record({ status_filter: fc.constantFrom("bogus", "RUNNING", "offline", "running,exited") }),
    fc.record({ sort_by: fc.constantFrom("bogus", "price", "created_at desc") }),
    fc.record({ limit: badLimit }),
    fc.record({ page_token: fc.constantFrom("garbage", "!!!", "eyJ4IjoxfQ", "%%%") }),
  ).map((p) => ({ method: "GET", path: `/api/gpu/instances?${q(p as Record<string, string>)}` })),
  fc.tuple(pathJunk, fc.constantFrom("", "/enhanced", "/cost-analysis", "/logs")).map(([id, suffix]) => ({
    method: "GET",
    path: `/api/gpu/instances/${id}${suffix}`,
  })),
  badLimit.map((limit) => ({ method: "GET", path: `/api/gpu/instances/gpu-1/logs?${q({ limit })}` })),
  pathJunk.map((id) => ({ method: "DELETE", path: `/api/gpu/instances/${id}` })),
  // IndexingService
  badInterval.map((interval) => ({ method: "GET", path: `/api/search/v1/index/db/goods?${q({ interval })}` })),
  fc.oneof(
    fc.record({ interval_minutes: fc.constantFrom("0", "-1", "abc", "1.5", "99999999999") }),
    fc.record({ chunk_size: fc.constantFrom("abc", "1.5", "1e4", "99999999999") }),
  ).map((p) => ({ method: "POST", path: `/api/search/v1/batch/product?${q(p)}` })),
  badLimit.map((limit) => ({ method: "GET", path: `/api/search/v1/batch/logs?${q({ limit })}` })),
  fc.constantFrom("/db/goods/cursor", "/db/marketing/cursor", "/db/event/cursor").map((p) => ({ method: "GET", path: `/api/search/v1/index${p}` })),
);

// Mutations that make any route's request bad: unknown parameters and fields, wrong JSON, size.
const routePaths = [
  ["GET", "/api/gpu/offers"], ["POST", "/api/gpu/search-offers"], ["GET", "/api/gpu/templates"],
  ["POST", "/api/gpu/instances"], ["GET", "/api/gpu/instances"], ["GET", "/api/gpu/statistics"],
  ["GET", "/api/search/v1/index/db/goods"], ["POST", "/api/search/v1/batch/product"], ["GET", "/api/search/v1/batch/logs"],
] as const;
const deepJson = fc.integer({ min: 100, max: 20_000 }).map((depth) => "[".repeat(depth) + "]".repeat(depth));
const genericBad: fc.Arbitrary<BadRequest> = fc.oneof(
  fc.tuple(fc.constantFrom(...routePaths), unknownName, junk).map(([[method, path], k, v]) => ({
    method,
    path: `${path}?${q({ [k]: v })}`,
  })),
  fc.tuple(fc.constantFrom("/api/gpu/search-offers", "/api/gpu/instances"), fc.oneof(
    fc.string().filter((s) => { if (s.trim() === "") return false; try { JSON.parse(s); return false; } catch { return true; } }),
    deepJson,
    fc.constantFrom("[]", "null", "42", '"text"', "{\"limit\": 1", "{'limit': 1}", "\uFEFF{}x"),
    unknownName.map((k) => json({ [k]: { nested: [1, 2, 3] } })),
  )).map(([path, body]) => ({ method: "POST", path, body, headers: { "content-type": "application/json" } })),
  fc.constantFrom("/api/gpu/search-offers", "/api/gpu/instances").map((path) => ({
    method: "POST",
    path,
    body: json({ gpu_name: "x".repeat(1_100_000) }),
  })),
  fc.tuple(fc.constantFrom("PUT", "PATCH", "DELETE"), fc.constantFrom(...routePaths.map(([, p]) => p))).map(([method, path]) => ({ method, path })),
  fc.string({ unit: "binary", maxLength: 40 }).map((s) => ({ method: "GET", path: `/api/${encodeURIComponent(s)}` })),
);

// The Connect protocol with the same kind of bad messages, and broken framing.
const connectRequests: fc.Arbitrary<BadRequest> = fc.oneof(
  fc.oneof(
    fc.record({ limit: fc.constantFrom(0, 1001, -5) }),
    fc.record({ sortBy: fc.constantFrom("bogus", "PRICE") }),
    fc.record({ maxPrice: fc.constantFrom(-1, "NaN") }),
    // (Connect JSON ignores unknown fields, as protobuf JSON parsers do for compatibility.)
  ).map((b) => ({ method: "POST", path: "/gpu.v1.GpuService/SearchOffers", body: json(b), headers: { "content-type": "application/json" } })),
  fc.oneof(fc.constant({}), fc.record({ templateName: fc.constant("nope") }), fc.record({ templateName: fc.constant("budget"), customConfig: badCustomConfig })).map((b) => ({
    method: "POST",
    path: "/gpu.v1.GpuService/CreateInstance",
    body: json(b),
    headers: { "content-type": "application/json" },
  })),
  badInterval.map((interval) => ({
    method: "POST",
    path: "/search.v1.IndexingService/IndexGoods",
    body: json({ interval }),
    headers: { "content-type": "application/json" },
  })),
  fc.tuple(
    // Read-only RPCs: random bytes may happen to be a valid message, which may then be answered.
    fc.constantFrom("/gpu.v1.GpuService/ListInstances", "/gpu.v1.GpuService/GetInstance", "/search.v1.IndexingService/ListBatchLogs", "/gpu.v1.GpuService/Nope"),
    fc.uint8Array({ minLength: 1, maxLength: 64 }),
    fc.constantFrom("application/proto", "application/json", "text/plain", "application/grpc"),
  ).map(([path, bytes, type]) => ({
    method: "POST",
    path,
    body: Buffer.from(bytes).toString("latin1"),
    headers: { "content-type": type },
    mayBeValid: true,
  })),
);

async function send(request: BadRequest): Promise<number> {
  tried++;
  const res = await fetch(`${server.url}${request.path}`, {
    method: request.method,
    body: request.body,
    headers: token === undefined ? request.headers : { ...request.headers, authorization: `Bearer ${token}` },
  });
  await res.arrayBuffer();
  return res.status;
}

async function snapshot() {
  const counts = await Promise.all(
    ["gpu_instances", "GpuExecutionLog", "PR_GOODS_SEARCH_INTF"].map(async (table) => {
      const exists = await db.knex.schema.hasTable(table);
      return [table, exists ? (await db.knex(table).count({ n: "*" }).first())?.n : "absent"];
    }),
  );
  const indices = await es.cat.indices({ index: `${goodsIndex}*,${logIndex}*`, format: "json", h: "index,docs.count" });
  return { counts, indices: indices.map((i) => `${i.index}:${i["docs.count"]}`).sort() };
}

describe.each(SETUPS)("fuzzing with bad requests, %s", (_setup, env, setupToken, share) => {
  beforeAll(async () => {
    token = setupToken;
    server = await startTestServer({ knex: db.knex, elasticsearch: es, env: { CRON_ENABLED: "false", GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex, ...env } });
  });

  afterAll(async () => {
    await server?.close();
  });

  it("never answers 5xx, never crashes, and changes neither the database nor the index", async () => {
    const before = await snapshot();
    for (const [name, arbitrary, runs] of [
      ["REST routes", restRequests, 2000],
      ["any route", genericBad, 600],
      ["Connect endpoints", connectRequests, 600],
    ] as const) {
      await fc.assert(
        fc.asyncProperty(arbitrary, async (request) => {
          const status = await send(request);
          if (status >= 500 || (status < 400 && !request.mayBeValid)) {
            const body = request.body === undefined ? "" : ` with body ${request.body.slice(0, 200)}`;
            throw new Error(`${name}: ${request.method} ${request.path.slice(0, 200)}${body} answered ${status}`);
          }
        }),
        { numRuns: Math.ceil(runs * share), seed: 20261122 },
      );
    }
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
    expect(await snapshot()).toEqual(before);
  });
});

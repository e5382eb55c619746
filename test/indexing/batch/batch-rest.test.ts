import type { Client } from "@elastic/elasticsearch";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IndexingService } from "../../../gen/search/v1/indexing_service_pb.js";
import { generateSources } from "../../../src/indexing/batch/source-generator.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { deleteGoodsIndices } from "../helpers.js";

// End to end: two real servers (two "replicas") on one database and one Elasticsearch, called
// over REST and with the generated Connect client.

const GOODS = 20_000;
let db: TestDatabase;
let es: Client;
let a: TestServer;
let b: TestServer;
const goodsIndex = uniqueIndexName("goods_rest");
const logIndex = uniqueIndexName("batch_log_rest");

beforeAll(async () => {
  db = await createTestDatabase();
  es = createTestElasticsearch();
  await generateSources(db.knex, { goods: GOODS });
  const env = { DATABASE_URL: db.url, GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex, CRON_ENABLED: "false" };
  a = await startTestServer({ knex: db.knex, elasticsearch: es, env });
  b = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), env });
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  if (es) await deleteGoodsIndices(es, goodsIndex, logIndex);
  await db?.drop();
  await es?.close();
});

async function call(server: TestServer, method: string, path: string) {
  const res = await fetch(`${server.url}${path}`, { method });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const batch = (server: TestServer, query = "") => call(server, "POST", `/api/search/v1/batch/product${query}`);
const logs = (query = "") => call(a, "GET", `/api/search/v1/batch/logs${query}`);

describe("POST /api/search/v1/batch/product", () => {
  it("runs a full batch and answers BatchExecutionResponse in snake_case", async () => {
    const { status, body } = await batch(a);
    expect(status).toBe(200);
    const eligible = GOODS - GOODS / 50; // every 50th generated goods is USE_YN='N'
    expect(body).toMatchObject({
      success: true,
      status: "COMPLETED",
      is_full_load: true,
      loaded_count: GOODS,
      fetched_count: eligible,
      indexed_count: eligible,
      failed_count: 0,
      chunk_size: 50_000,
      warnings: [],
    });
    expect(body.batch_id).toMatch(/^product_20\d{15}$/);
    expect(Object.keys(body).sort()).toEqual(
      ["batch_id", "chunk_size", "elapsed_ms", "failed_count", "fetched_count", "indexed_count", "is_full_load", "loaded_count", "message", "status", "success", "warnings"],
    );
    await es.indices.refresh({ index: goodsIndex });
    expect((await es.count({ index: goodsIndex })).count).toBe(eligible);
  });

  it("lowers and raises chunk_size into 10,000..100,000 and says so", async () => {
    const low = await batch(a, "?interval_minutes=5&chunk_size=500");
    expect(low.status).toBe(200);
    expect(low.body).toMatchObject({ chunk_size: 10_000, is_full_load: false, loaded_count: 0, warnings: [expect.stringMatching(/raised to 10000/)] });
    const high = await batch(a, "?interval_minutes=5&chunk_size=500000");
    expect(high.body).toMatchObject({ chunk_size: 100_000, warnings: [expect.stringMatching(/lowered to 100000/)] });
  });

  it.each(["chunk_size=abc", "chunk_size=2.5", "interval_minutes=abc", "interval_minutes=0", "interval_minutes=-5"])(
    "answers 400 with a detail for %s and runs nothing",
    async (query) => {
      const before = await logs("?limit=1000");
      const { status, body } = await batch(a, `?${query}`);
      expect(status).toBe(400);
      expect(body.detail).toMatch(query.split("=")[0]!);
      expect((await logs("?limit=1000")).body.logs).toHaveLength((before.body.logs as unknown[]).length);
    },
  );

  it("answers 500 with batch_id, FAILED and LOAD_FAILED when the load fails, and serves the next request", async () => {
    const before = await db.knex("PR_GOODS_SEARCH_INTF").count({ n: "*" }).first();
    await db.knex.raw("alter table goods_price rename to goods_price_broken");
    let failed;
    try {
      failed = await batch(a);
    } finally {
      await db.knex.raw("alter table goods_price_broken rename to goods_price");
    }
    expect(failed.status).toBe(500);
    expect(failed.body).toMatchObject({ status: "FAILED", code: "LOAD_FAILED", batch_id: expect.stringMatching(/^product_/) });
    expect(failed.body.detail).toMatch(/unchanged/);
    expect(failed.body.detail).not.toMatch(/select|relation/i);
    expect(await db.knex("PR_GOODS_SEARCH_INTF").count({ n: "*" }).first()).toEqual(before);
    const newest = (await logs("?limit=1")).body.logs as Array<Record<string, unknown>>;
    expect(newest[0]).toMatchObject({ batch_id: failed.body.batch_id, status: "FAILED", details: { error: { code: "LOAD_FAILED", step: "load" } } });
    expect((await batch(a, "?interval_minutes=1")).status).toBe(200);
  });

  it("lets one of two concurrent batches on two servers run and answers the other 409 naming it", async () => {
    const [first, second] = await Promise.all([batch(a), batch(b)]);
    const statuses = [first.status, second.status].sort();
    expect(statuses).toEqual([200, 409]);
    const refused = first.status === 409 ? first : second;
    expect(refused.body.detail).toMatch(/'product_batch' is already running since 20\d\d-/);
    expect((await batch(b, "?interval_minutes=1")).status).toBe(200);
  });
});

describe("GET /api/search/v1/batch/logs", () => {
  it("lists recent logs newest first with RFC 3339 times and snake_case details", async () => {
    const { status, body } = await logs("?limit=2");
    expect(status).toBe(200);
    const list = body.logs as Array<Record<string, any>>;
    expect(list).toHaveLength(2);
    expect(list[0]!.started_at >= list[1]!.started_at).toBe(true);
    expect(list[0]).toMatchObject({ job_name: "product_batch", status: "COMPLETED", details: { job_type: "incremental", source_index: "PR_GOODS_SEARCH_INTF", target_index: goodsIndex } });
    expect(list[0]!.started_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
  });

  it.each(["limit=abc", "limit=0", "limit=1001"])("answers 400 for %s", async (query) => {
    const { status, body } = await logs(`?${query}`);
    expect(status).toBe(400);
    expect(body.detail).toMatch(/limit/);
  });
});

describe("the generated Connect client", () => {
  it("runs an incremental batch and reads the logs", async () => {
    const client = createClient(IndexingService, createConnectTransport({ baseUrl: b.url, httpVersion: "1.1" }));
    const result = await client.runProductBatch({ intervalMinutes: 10, chunkSize: 20_000 });
    expect(result).toMatchObject({ status: "COMPLETED", isFullLoad: false, chunkSize: 20_000 });
    const { logs: recent } = await client.listBatchLogs({ limit: 1 });
    expect(recent[0]?.batchId).toBe(result.batchId);
    expect(recent[0]?.details?.chunkSize).toBe(20_000);
  });

  it("gets aborted while a batch runs on the other server", async () => {
    const client = createClient(IndexingService, createConnectTransport({ baseUrl: b.url, httpVersion: "1.1" }));
    const running = batch(a);
    await new Promise((r) => setTimeout(r, 100));
    const err = await client.runProductBatch({}).then(() => undefined, (e: unknown) => e);
    expect((await running).status).toBe(200);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Aborted);
  });
});

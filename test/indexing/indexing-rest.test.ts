import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Client } from "@elastic/elasticsearch";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { IndexingService } from "../../gen/search/v1/indexing_service_pb.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { createJobLock } from "../../src/indexing/job-lock.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { flagCounts, silentLogger, deleteGoodsIndices } from "./helpers.js";

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_rest");
let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 200, unusedEvery: 10 });
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: es,
    env: { DATABASE_URL: db.url, GOODS_INDEX: index, INDEX_BULK_SIZE: "40", INDEX_FETCH_SIZE: "64" },
  });
});

afterAll(async () => {
  await server?.close();
  await deleteGoodsIndices(es, index);
  await db?.drop();
  await es.close();
});

async function get(path: string) {
  const res = await fetch(`${server.url}${path}`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe("GET /api/search/v1/index/db/goods", () => {
  it("runs full mode without interval and answers the counts in snake_case", async () => {
    const { status, body } = await get("/api/search/v1/index/db/goods");
    expect(status).toBe(200);
    expect(body).toMatchObject({ success: true, mode: "full", fetched_count: 180, indexed_count: 180 });
    expect(body.failed_count ?? 0).toBe(0);
    expect(typeof body.elapsed_ms).toBe("number");
    expect(body.message).toMatch(/^full indexing into 'goods_rest_[0-9a-f]+': fetched 180, indexed 180 in \d+ ms$/);
    expect((await es.count({ index })).count).toBe(180);
  });

  it("runs cursor mode for interval=1 over the Connect protocol", async () => {
    const client = createClient(IndexingService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    const response = await client.indexGoods({ interval: "1" });
    expect(response).toMatchObject({ success: true, mode: "cursor", fetchedCount: 180, indexedCount: 180, failedCount: 0 });
    expect(await flagCounts(db.knex)).toEqual({ Y: 180 });
    const again = await client.indexGoods({ interval: "1" });
    expect(again.fetchedCount).toBe(0);
  });

  it("runs incremental mode for an interval of whole minutes >= 2", async () => {
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SYS_MOD_DTM" = now() where "GOODS_NO" in ('G0000000001', 'G0000000002', 'G0000000010')`);
    const { status, body } = await get("/api/search/v1/index/db/goods?interval=15");
    expect(status).toBe(200);
    expect(body).toMatchObject({ mode: "incremental", fetched_count: 2, indexed_count: 2 });
  });

  it("treats an empty interval as absent: full mode", async () => {
    const { status, body } = await get("/api/search/v1/index/db/goods?interval=");
    expect(status).toBe(200);
    expect(body).toMatchObject({ mode: "full", fetched_count: 180 });
  });

  it("answers the drift on GET .../status: alias, its physical index, counts and the last run of each mode", async () => {
    const { status, body } = await get("/api/search/v1/index/db/goods/status");
    expect(status).toBe(200);
    expect(body).toMatchObject({ alias: index, document_count: 180, eligible_rows: 180 });
    expect(body.physical_index).toMatch(new RegExp(`^${index}_\\d{14}$`));
    expect(body.pending_rows ?? 0).toBe(0);
    expect(body.drift ?? 0).toBe(0);
    const runs = body.last_runs as Array<Record<string, unknown>>;
    expect(runs.map((run) => run.mode).sort()).toEqual(["cursor", "full", "incremental"]);
    expect(runs.find((run) => run.mode === "full")).toMatchObject({ success: true, fetched_count: 180, indexed_count: 180 });
    expect(typeof runs[0]?.finished_at).toBe("string");
  });

  it.each(["abc", "0", "-5", "2.5", "1e3", "01", "+5", "+2", " 1", "1 ", " ", "99999999"])("answers 400 for interval=%j and changes nothing", async (interval) => {
    const before = await flagCounts(db.knex);
    const { status, body } = await get(`/api/search/v1/index/db/goods?interval=${encodeURIComponent(interval)}`);
    expect(status).toBe(400);
    expect(body.detail).toMatch(/interval must be/);
    expect(body.field).toBe("interval");
    expect(await flagCounts(db.knex)).toEqual(before);
  });

  it.each(["/db/goods/cursor", "/db/marketing/cursor", "/db/event/cursor"])("answers 404 for the removed path %s", async (path) => {
    const { status, body } = await get(`/api/search/v1/index${path}`);
    expect(status).toBe(404);
    expect(typeof body.detail).toBe("string");
  });

  it("answers 409 naming the running job while another process holds the job lock", async () => {
    const otherProcess = createJobLock({ databaseUrl: db.url, logger: silentLogger });
    let release!: () => void;
    let held!: () => void;
    const holding = new Promise<void>((resolve) => (held = resolve));
    const job = otherProcess.run("product_batch", () => {
      held();
      return new Promise<void>((resolve) => (release = resolve));
    });
    await holding;
    try {
      const { status, body } = await get("/api/search/v1/index/db/goods?interval=1");
      expect(status).toBe(409);
      expect(body.detail).toMatch(/indexing job 'product_batch' is already running since \d{4}-\d\d-\d\dT/);

      const client = createClient(IndexingService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
      const error = await client.indexGoods({}).catch((err: unknown) => err);
      expect(ConnectError.from(error).code).toBe(Code.Aborted);
    } finally {
      release();
      await job;
    }
    expect((await get("/api/search/v1/index/db/goods?interval=1")).status).toBe(200);
  });
});

describe("GET /api/search/v1/index/db/goods with Elasticsearch unreachable", () => {
  it("answers 503 with a detail naming Elasticsearch", async () => {
    const unreachable = new Client({ node: "http://127.0.0.1:9", maxRetries: 0, requestTimeout: 2000 });
    const down = await startTestServer({ knex: db.knex, elasticsearch: unreachable, env: { GOODS_INDEX: index } });
    try {
      const res = await fetch(`${down.url}/api/search/v1/index/db/goods`);
      expect(res.status).toBe(503);
      expect(((await res.json()) as { detail: string }).detail).toMatch(/Elasticsearch is unreachable/);
    } finally {
      await down.close();
      await unreachable.close();
    }
  });
});

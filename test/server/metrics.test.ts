import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { deleteGoodsIndices } from "../indexing/helpers.js";

let db: TestDatabase;
let server: TestServer;
const es = createTestElasticsearch();
const goodsIndex = uniqueIndexName("metrics_goods");
const logIndex = uniqueIndexName("metrics_batch_log");

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: es,
    env: { DATABASE_URL: db.url, GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex },
  });
});

afterAll(async () => {
  await server?.close();
  await db?.drop();
  await deleteGoodsIndices(es, goodsIndex, logIndex);
});

function sample(text: string, name: string, labels: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.split(" ").pop());
}

describe("GET /metrics", () => {
  it("counts REST requests by route pattern and status, and RPCs by method and code", async () => {
    await fetch(`${server.url}/api/gpu/templates/budget`);
    await fetch(`${server.url}/api/gpu/templates/nope`);
    await fetch(`${server.url}/api/gpu/templates/nope-again`);
    const client = createClient(GpuService, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    await client.getTemplate({ templateName: "research" });
    await client.getTemplate({ templateName: "missing" }).catch(() => undefined);

    const res = await fetch(`${server.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain/);
    const text = await res.text();
    const route = 'route="/api/gpu/templates/{template_name}",method="GET"';
    expect(sample(text, "http_requests_total", `${route},status="200"`)).toBe(1);
    expect(sample(text, "http_requests_total", `${route},status="404"`)).toBe(2);
    expect(sample(text, "rpc_requests_total", 'service="gpu.v1.GpuService",method="GetTemplate",code="ok"')).toBe(1);
    expect(sample(text, "rpc_requests_total", 'service="gpu.v1.GpuService",method="GetTemplate",code="not_found"')).toBe(1);
    expect(text).toMatch(/http_request_duration_seconds_bucket\{le="0.05",route="\/api\/gpu\/templates\/\{template_name\}"/);
    expect(text).toMatch(/process_resident_memory_bytes \d+/);
  });

  it("reports stored GPU instances by status", async () => {
    await db.knex("gpu_instances").insert([
      { instance_id: "gpu-1", offer_id: "1", status: "running", cost_per_hour: 0.5 },
      { instance_id: "gpu-2", offer_id: "2", status: "running", cost_per_hour: 0.7 },
      { instance_id: "gpu-3", offer_id: "3", status: "exited", cost_per_hour: 0.2 },
    ]);
    const text = await (await fetch(`${server.url}/metrics`)).text();
    expect(sample(text, "gpu_instances", 'status="running"')).toBe(2);
    expect(sample(text, "gpu_instances", 'status="exited"')).toBe(1);
  });
});

describe("indexing metrics", () => {
  it("count runs by mode and outcome, documents by result, and batches by status", async () => {
    await generateGoods(db.knex, { rows: 120 });
    const eligible = Number((await db.knex("PR_GOODS_SEARCH_INTF").where({ USE_YN: "Y" }).count({ n: "*" }).first())?.n);
    expect((await fetch(`${server.url}/api/search/v1/index/db/goods?interval=1`)).status).toBe(200);
    expect((await fetch(`${server.url}/api/search/v1/batch/product`, { method: "POST" })).status).toBe(200);

    const text = await (await fetch(`${server.url}/metrics`)).text();
    expect(sample(text, "indexing_documents_total", 'mode="cursor",result="indexed"')).toBe(eligible);
    expect(sample(text, "indexing_documents_total", 'mode="cursor",result="failed"')).toBe(0);
    // One cursor run on request, one as step 2 of the batch.
    expect(sample(text, "indexing_runs_total", 'mode="cursor",outcome="ok"')).toBe(2);
    expect(sample(text, "indexing_last_run_docs_per_second", 'mode="cursor"')).toBeGreaterThanOrEqual(0);
    expect(sample(text, "batch_runs_total", 'status="COMPLETED"')).toBe(1);
    expect(text).toMatch(/# TYPE indexing_job_running gauge/);
    expect(text).not.toMatch(/^indexing_job_running\{/m);
  });

  it("reports the drift figures as last measured: at the end of a run and on GET .../status", async () => {
    // The batch of the test above truncated the table: these 30 rows are all there is.
    await generateGoods(db.knex, { rows: 30, firstNo: 80_001, unusedEvery: 0 });
    expect((await fetch(`${server.url}/api/search/v1/index/db/goods`)).status).toBe(200);
    const afterRun = await (await fetch(`${server.url}/metrics`)).text();
    expect(gauge(afterRun, "goods_index_documents")).toBe(30);
    expect(gauge(afterRun, "goods_index_eligible_rows")).toBe(30);
    expect(gauge(afterRun, "goods_index_drift")).toBe(0);

    // Rows added behind the index's back show once measured again.
    await generateGoods(db.knex, { rows: 7, firstNo: 90_001, unusedEvery: 0 });
    expect((await fetch(`${server.url}/api/search/v1/index/db/goods/status`)).status).toBe(200);
    const afterStatus = await (await fetch(`${server.url}/metrics`)).text();
    expect(gauge(afterStatus, "goods_index_drift")).toBe(7);
    // Full mode does not touch INDEX_YN: its 30 rows are pending for the cursor mode as well.
    expect(gauge(afterStatus, "goods_index_pending_rows")).toBe(37);
    expect(gauge(afterStatus, "goods_index_eligible_rows")).toBe(37);
    expect(gauge(afterStatus, "goods_index_documents")).toBe(30);
  });
});

function gauge(text: string, name: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(" ").pop());
}

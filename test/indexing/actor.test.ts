import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { lastRuns } from "../../src/indexing/goods/index-runs.js";
import { createIndexingWiring } from "../../src/indexing/indexing-wiring.js";
import { createJobLock } from "../../src/indexing/job-lock.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer, type TestServer } from "../support/server.js";
import { createTokenFile } from "../support/token-file.js";
import { deleteGoodsIndices, silentLogger } from "./helpers.js";

// Index runs and batch logs name their actor: the token's name when a client asks, `cron` when
// the schedule runs them. The status RPC's last_runs and the batch log answers show it.

const es = createTestElasticsearch();
const goodsIndex = uniqueIndexName("goods_actor");
const logIndex = uniqueIndexName("batch_log_actor");
const scheduler = { name: "scheduler", secret: "sched-secret", scopes: ["indexing:run", "indexing:read"] };
let db: TestDatabase;
let server: TestServer;
let tokenFile: ReturnType<typeof createTokenFile>;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 50, unusedEvery: 10 });
  tokenFile = createTokenFile([scheduler]);
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: es,
    env: { DATABASE_URL: db.url, GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex, AUTH_TOKENS_FILE: tokenFile.path },
  });
});

afterAll(async () => {
  await server?.close();
  await deleteGoodsIndices(es, goodsIndex);
  await es.indices.delete({ index: logIndex, ignore_unavailable: true });
  await db?.drop();
  tokenFile?.remove();
});

const call = async (method: string, path: string) => {
  const res = await fetch(`${server.url}${path}`, { method, headers: { authorization: `Bearer ${scheduler.secret}` } });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

const runActors = async () => Object.fromEntries((await lastRuns(db.knex)).map((r) => [r.mode, r.actor]));

describe("the actor of indexing work", () => {
  it("is the token's name on an index run, in the status answer", async () => {
    expect((await call("GET", "/api/search/v1/index/db/goods?interval=1")).status).toBe(200);
    const status = await call("GET", "/api/search/v1/index/db/goods/status");
    const runs = status.body.last_runs as Array<{ mode: string; actor: string }>;
    expect(runs.find((r) => r.mode === "cursor")?.actor).toBe("scheduler");
  });

  it("is the token's name on a batch, in its log document and its run", async () => {
    const batch = await call("POST", "/api/search/v1/batch/product");
    expect(batch.status).toBe(200);
    const logs = (await call("GET", "/api/search/v1/batch/logs")).body.logs as Array<{ batch_id: string; actor: string }>;
    expect(logs.find((l) => l.batch_id === batch.body.batch_id)?.actor).toBe("scheduler");
    const stored = await es.get<{ actor: string }>({ index: logIndex, id: batch.body.batch_id as string });
    expect(stored._source?.actor).toBe("scheduler");
    expect((await runActors()).batch).toBe("scheduler");
  });

  it("is cron on the scheduled batch and incremental run", async () => {
    const config = loadConfig({ CRON_ENABLED: "true", GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex, INDEX_LIVE: "false" });
    const jobLock = createJobLock({ databaseUrl: db.url, logger: silentLogger });
    const wiring = createIndexingWiring({ knex: db.knex, elasticsearch: es, logger: silentLogger, indexing: config.indexing, batch: config.batch, jobLock });
    try {
      expect(await wiring.cron.fire("product_batch")).toBe("completed");
      expect(await wiring.cron.fire("index_goods_incremental")).toBe("completed");
    } finally {
      await jobLock.abortAndWait();
    }
    // The batch's step 2 is a cursor run of its own, by the same actor.
    expect(await runActors()).toMatchObject({ batch: "cron", incremental: "cron", cursor: "cron" });
    const [newest] = await wiring.logs.list(1);
    expect(newest?.actor).toBe("cron");
  });

  it("reads unknown on a batch log saved before actors were", async () => {
    await es.index({
      index: logIndex,
      id: "product_20000101000000000",
      refresh: true,
      document: { batch_id: "product_20000101000000000", job_name: "product_batch", status: "COMPLETED", started_at: "2000-01-01T00:00:00Z", finished_at: "2000-01-01T00:00:01Z", elapsed_ms: 1000, details: { message: "old" } },
    });
    const logs = (await call("GET", "/api/search/v1/batch/logs?limit=100")).body.logs as Array<{ batch_id: string; actor: string }>;
    expect(logs.find((l) => l.batch_id === "product_20000101000000000")?.actor).toBe("unknown");
  });
});

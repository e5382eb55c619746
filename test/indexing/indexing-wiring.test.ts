import type { Client } from "@elastic/elasticsearch";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { BatchLogStore } from "../../src/indexing/batch/batch-log.js";
import { createIndexingWiring } from "../../src/indexing/indexing-wiring.js";
import { createJobLock } from "../../src/indexing/job-lock.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { insertCatalogue } from "./batch/fixtures.js";
import { deleteGoodsIndices } from "./helpers.js";

// The cron tasks as the indexing module builds them from configuration, fired for real.

const logger = pino({ level: "silent" });
let db: TestDatabase;
let es: Client;
const goodsIndex = uniqueIndexName("goods_wiring");
const logIndex = uniqueIndexName("batch_log_wiring");

beforeAll(async () => {
  db = await createTestDatabase();
  es = createTestElasticsearch();
  await insertCatalogue(db.knex, new Date());
});

afterAll(async () => {
  if (es) await deleteGoodsIndices(es, goodsIndex, logIndex);
  await db?.drop();
  await es?.close();
});

function wiring(env: Record<string, string>) {
  const config = loadConfig({ GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex, ...env });
  const jobLock = createJobLock({ databaseUrl: db.url, logger });
  return createIndexingWiring({ knex: db.knex, elasticsearch: es, logger, indexing: config.indexing, batch: config.batch, jobLock });
}

describe("cron tasks of the indexing module", () => {
  it("schedules the batch and incremental indexing, and their ticks run the real jobs", async () => {
    const { cron } = wiring({});
    expect(cron.tasks().map((t) => [t.name, t.expression])).toEqual([
      ["product_batch", "0 1 * * *"],
      ["index_goods_incremental", "*/30 * * * *"],
    ]);
    expect(await cron.fire("product_batch")).toBe("completed");
    const [log] = await BatchLogStore.create({ elasticsearch: es, index: logIndex }).list(1);
    expect(log).toMatchObject({ status: "COMPLETED", details: { job_type: "full", chunk_size: 50_000, fetched_count: 3 } });
    // the rows the batch just wrote are within the 30-minute window of the incremental run
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G1" }).update({ GOODS_NM: "changed directly" });
    expect(await cron.fire("index_goods_incremental")).toBe("completed");
    const doc = await es.get<{ GOODS_NM: string }>({ index: goodsIndex, id: "G1" });
    expect(doc._source?.GOODS_NM).toBe("changed directly");
    await cron.stop();
  });

  it("leaves out a task set to off, and every task when CRON_ENABLED=false", async () => {
    const batchOff = wiring({ CRON_BATCH: "off" }).cron;
    const allOff = wiring({ CRON_ENABLED: "false" }).cron;
    expect(batchOff.tasks().map((t) => t.name)).toEqual(["index_goods_incremental"]);
    expect(allOff.tasks()).toEqual([]);
    await Promise.all([batchOff.stop(), allOff.stop()]);
  });
});

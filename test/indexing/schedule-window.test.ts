import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { createIndexingWiring } from "../../src/indexing/indexing-wiring.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { incrementalWindowMinutes } from "../../src/indexing/goods/index-runs.js";
import { createJobLock } from "../../src/indexing/job-lock.js";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { deleteGoodsIndices } from "./helpers.js";

// The scheduled incremental run covers since the start of the last successful run, as recorded
// in PostgreSQL: a tick skipped because the lock was held, and a restart, lose no row.

const logger = pino({ level: "silent" });
const es = createTestElasticsearch();
const goodsIndex = uniqueIndexName("goods_schedule");
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 100, unusedEvery: 0 });
});

afterAll(async () => {
  await deleteGoodsIndices(es, goodsIndex);
  await db?.drop();
  await es.close();
});

/** The cron runner as a freshly started process builds it: no state but the database. */
function startProcess() {
  const config = loadConfig({ GOODS_INDEX: goodsIndex, CRON_INCREMENTAL_MINUTES: "30", CRON_INCREMENTAL_OVERLAP_MINUTES: "5" });
  const jobLock = createJobLock({ databaseUrl: db.url, logger });
  return createIndexingWiring({ knex: db.knex, elasticsearch: es, logger, indexing: config.indexing, batch: config.batch, jobLock }).cron;
}

const lastSuccess = async () =>
  (await db.knex("goods_index_runs").where({ mode: "incremental" }).first("last_success_started_at"))?.last_success_started_at as Date | undefined;

describe("the scheduled incremental run", () => {
  it("covers at least CRON_INCREMENTAL_MINUTES plus the overlap when the last run is recent", async () => {
    const first = startProcess();
    expect(await first.fire("index_goods_incremental")).toBe("completed");
    await first.stop();
    expect(await incrementalWindowMinutes(db.knex, 30, 5)).toBe(35);
  });

  it("catches up after a skipped tick and a restart: a row changed 90 minutes ago is indexed", async () => {
    // The last successful run started two hours ago; every tick since found the lock taken.
    await db.knex("goods_index_runs").where({ mode: "incremental" }).update({ last_success_started_at: db.knex.raw("now() - interval '2 hours'") });
    await db.knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: "G0000000042" }).update({ GOODS_NM: "changed long ago", SYS_MOD_DTM: db.knex.raw("now() - interval '90 minutes'") });
    const recorded = await lastSuccess();

    const other = createJobLock({ databaseUrl: db.url, logger });
    let release = () => {};
    let held = () => {};
    const lockHeld = new Promise<void>((resolve) => (held = resolve));
    const holding = other.run("product_batch", () => {
      held();
      return new Promise<void>((resolve) => (release = resolve));
    });
    await lockHeld;
    const before = startProcess();
    try {
      expect(await before.fire("index_goods_incremental")).toBe("skipped");
    } finally {
      release();
      await holding;
      await before.stop();
    }
    expect(await lastSuccess()).toEqual(recorded);

    const restarted = startProcess();
    expect(await restarted.fire("index_goods_incremental")).toBe("completed");
    await restarted.stop();
    const doc = await es.get<{ GOODS_NM: string }>({ index: goodsIndex, id: "G0000000042" });
    expect(doc._source?.GOODS_NM).toBe("changed long ago");
    expect((await lastSuccess())!.getTime()).toBeGreaterThan(recorded!.getTime());
  });
});

import type { Client } from "@elastic/elasticsearch";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../../src/errors.js";
import type { CursorIndexer } from "../../../src/indexing/batch/batch-service.js";
import { createJobLock } from "../../../src/indexing/job-lock.js";
import { createCronRunner } from "../../../src/indexing/schedule.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { insertCatalogue } from "./fixtures.js";
import { createBatchHarness, deleteHarnessIndexes } from "./harness.js";

// The batch holds the one indexing job lock from its first statement to its log: a cron tick of
// this process or of another replica (another lock instance on the same database) is skipped.

let db: TestDatabase;
let es: Client;

beforeAll(async () => {
  db = await createTestDatabase();
  es = createTestElasticsearch();
  await insertCatalogue(db.knex, new Date());
});

afterAll(async () => {
  await deleteHarnessIndexes(es);
  await db?.drop();
  await es?.close();
});

/** Step 2 that waits for the test to open the gate before indexing for real. */
function gated() {
  let open!: () => void;
  let entered!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const inStep2 = new Promise<void>((r) => (entered = r));
  const wrap = (real: CursorIndexer): CursorIndexer => async (options) => {
    entered();
    await gate;
    return real(options);
  };
  return { wrap, open, inStep2 };
}

describe("a cron tick during a batch", () => {
  it("is skipped and logged, on this replica and on another one, and the batch completes", async () => {
    const step2 = gated();
    const replicaA = createBatchHarness({ knex: db.knex, databaseUrl: db.url, elasticsearch: es, indexCursor: step2.wrap });
    const replicaB = createBatchHarness({ knex: db.knex, databaseUrl: db.url, elasticsearch: es });
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const cronA = createCronRunner({ jobs: [{ name: "product_batch", expression: "0 1 * * *", run: () => replicaA.batch.run({}) }], logger });
    const cronB = createCronRunner({
      jobs: [{ name: "index_goods_incremental", expression: "*/30 * * * *", run: () => replicaB.lock.run("index_goods_incremental", async () => "ran") }],
      logger,
    });

    const running = replicaA.batch.run({});
    await step2.inStep2;
    expect(await cronA.fire("product_batch")).toBe("skipped");
    expect(await cronB.fire("index_goods_incremental")).toBe("skipped");
    await expect(replicaB.batch.run({})).rejects.toBeInstanceOf(ConflictError);
    step2.open();

    expect((await running).status).toBe("COMPLETED");
    const skipped = lines.filter((l) => l.msg === "cron tick skipped: another indexing job is running");
    expect(skipped.map((l) => l.job)).toEqual(["product_batch", "index_goods_incremental"]);
    expect(skipped.every((l) => String(l.reason).includes("product_batch"))).toBe(true);
    // the lock is free again: the next tick runs
    expect(await cronB.fire("index_goods_incremental")).toBe("completed");
    await Promise.all([cronA.stop(), cronB.stop()]);
  });

  it("uses the shared lock of the indexing jobs: a batch during another job answers 409", async () => {
    const lock = createJobLock({ databaseUrl: db.url, logger: pino({ level: "silent" }) });
    const h = createBatchHarness({ knex: db.knex, databaseUrl: db.url, elasticsearch: es });
    let release!: () => void;
    const other = lock.run("index_goods_full", () => new Promise<void>((r) => (release = r)));
    await new Promise((r) => setTimeout(r, 200));
    await expect(h.batch.run({})).rejects.toThrow(/'index_goods_full' is already running/);
    release();
    await other;
    expect((await h.batch.run({})).status).toBe("COMPLETED");
  });
});

describe("shutdown during a batch", () => {
  it("aborts step 2 cleanly: the batch completes with a warning, the lock is free and the rows stay N", async () => {
    const step2 = gated();
    const h = createBatchHarness({ knex: db.knex, databaseUrl: db.url, elasticsearch: es, indexCursor: step2.wrap });
    const running = h.batch.run({});
    await step2.inStep2;
    const stopped = h.lock.abortAndWait();
    step2.open();
    await stopped;
    const result = await running;
    expect(result).toMatchObject({ status: "COMPLETED", indexedCount: 0, warnings: [expect.stringMatching(/aborted/)] });
    expect(await db.knex("PR_GOODS_SEARCH_INTF").where({ USE_YN: "Y", INDEX_YN: "Y" }).count({ n: "*" }).first()).toEqual({ n: "0" });
    expect(h.lock.current()).toBeUndefined();
  });
});

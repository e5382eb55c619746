import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSources } from "../../src/indexing/batch/source-generator.js";
import { documentCount, flagCounts, deleteGoodsIndices, otherSessions } from "../indexing/helpers.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { spawnService, type ServiceProcess } from "../support/spawn-service.js";
import { waitFor } from "../support/wait.js";

// The service process SIGKILLed while the product batch is in step 2 (a rebuild), or during a
// cursor run, then started again: nothing of the dead process may block or lose anything, and a
// cursor run keeps the progress of its settled bulks.

const GOODS = 20_000;
/** The job lock's advisory key (src/indexing/job-lock.ts). */
const ADVISORY_LOCK_KEY = 1_229_866_072;

const es = createTestElasticsearch();
const goodsIndex = uniqueIndexName("goods_kill");
const logIndex = uniqueIndexName("batch_log_kill");
let db: TestDatabase;
const started: ServiceProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await generateSources(db.knex, { goods: GOODS });
});

afterAll(async () => {
  await Promise.all(started.map((service) => service.stop("SIGKILL")));
  await deleteGoodsIndices(es, goodsIndex, logIndex);
  await db?.drop();
  await es.close();
});

async function start(env: Record<string, string> = {}): Promise<ServiceProcess> {
  const service = await spawnService({
    DATABASE_URL: db.url,
    ELASTICSEARCH_URL: elasticsearchUrl(),
    GOODS_INDEX: goodsIndex,
    BATCH_LOG_INDEX: logIndex,
    INDEX_FETCH_SIZE: "5000",
    ...env,
  });
  started.push(service);
  return service;
}

async function count(sql: string, bindings: readonly number[] = []): Promise<number> {
  const { rows } = await db.knex.raw<{ rows: Array<{ n: number }> }>(sql, bindings);
  return rows[0]!.n;
}

/** Documents written so far into the matching indices, refreshed or not. */
async function documentsWritten(pattern: string): Promise<number> {
  const stats = await es.indices.stats({ index: pattern, metric: "indexing" });
  return stats._all.primaries?.indexing?.index_total ?? 0;
}

const advisoryLocksHeld = () =>
  count(
    `select count(*)::int as n from pg_locks
      where locktype = 'advisory' and objid = ? and database = (select oid from pg_database where datname = current_database())`,
    [ADVISORY_LOCK_KEY],
  );

describe("the service SIGKILLed mid-batch", () => {
  it("leaves no lock behind, and after a restart the next cursor run indexes every eligible row", async () => {
    const first = await start();
    const batch = fetch(`${first.url}/api/search/v1/batch/product?chunk_size=10000`, { method: "POST" }).catch((err: unknown) => err);
    // Step 2 is under way once the index it builds has taken a first bulk.
    await waitFor(async () => (await documentsWritten(`${goodsIndex}_*`)) > 0, "step 2 to write a first bulk");
    expect(await advisoryLocksHeld()).toBe(1);

    expect(await first.stop("SIGKILL")).toEqual({ code: null, signal: "SIGKILL" });
    expect(await batch).toBeInstanceOf(Error);
    // The rebuild never went live: no alias yet, and it flips nothing before its swap.
    // The lock lived on the dead process's connection: PostgreSQL ends that session and frees it.
    await waitFor(async () => (await advisoryLocksHeld()) === 0, "the advisory lock to be released", 30_000);

    const eligible = await count(`select count(*)::int as n from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`);
    expect(eligible).toBeGreaterThan(GOODS / 2);
    expect((await flagCounts(db.knex)).Y ?? 0).toBe(0);

    const second = await start();
    const res = await fetch(`${second.url}/api/search/v1/index/db/goods?interval=1`);
    const body = (await res.json()) as Record<string, unknown>;
    expect(res.status).toBe(200);
    expect(body).toMatchObject({ success: true, mode: "cursor", fetched_count: eligible, indexed_count: eligible });
    expect(await flagCounts(db.knex)).toEqual({ Y: eligible });
    expect(await documentCount(es, goodsIndex)).toBe(eligible);
    // The dead rebuild's partial index was deleted by the next run's clean-up.
    expect(Object.keys(await es.indices.get({ index: `${goodsIndex}_*` }))).toEqual(Object.keys(await es.indices.getAlias({ name: goodsIndex })));
    expect(await second.stop("SIGTERM")).toEqual({ code: 0, signal: null });
  }, 120_000);
});

describe("the service SIGKILLed mid cursor run", () => {
  it("keeps its settled bulks' rows at 'Y', and the next run indexes only the rest", async () => {
    // A clean slate: every eligible row pending, behind the alias the batch test left.
    await db.knex("PR_GOODS_SEARCH_INTF").update({ INDEX_YN: "N" });
    const eligible = await count(`select count(*)::int as n from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`);
    const first = await start({ INDEX_BULK_SIZE: "1000", INDEX_BULKS_IN_FLIGHT: "1" });
    const run = fetch(`${first.url}/api/search/v1/index/db/goods?interval=1`).catch((err: unknown) => err);
    await waitFor(async () => ((await flagCounts(db.knex)).Y ?? 0) >= 5_000, "a few bulks to settle");

    expect(await first.stop("SIGKILL")).toEqual({ code: null, signal: "SIGKILL" });
    expect(await run).toBeInstanceOf(Error);
    await waitFor(async () => (await advisoryLocksHeld()) === 0, "the advisory lock to be released", 30_000);
    // A flip statement the dead process sent just before the kill still runs to its commit on its
    // own session: count the settled rows once no statement of it is left running.
    await waitFor(async () => (await otherSessions(db.knex)).every((s) => s.state !== "active"), "the dead process's statements to end", 30_000);
    const settled = (await flagCounts(db.knex)).Y ?? 0;
    expect(settled).toBeGreaterThanOrEqual(5_000);
    expect(settled).toBeLessThan(eligible);

    const second = await start();
    const res = await fetch(`${second.url}/api/search/v1/index/db/goods?interval=1`);
    const body = (await res.json()) as Record<string, unknown>;
    expect(res.status).toBe(200);
    expect(body).toMatchObject({ success: true, mode: "cursor", fetched_count: eligible - settled, indexed_count: eligible - settled });
    expect(await flagCounts(db.knex)).toEqual({ Y: eligible });
    expect(await documentCount(es, goodsIndex)).toBe(eligible);
    expect(await second.stop("SIGTERM")).toEqual({ code: 0, signal: null });
  }, 120_000);
});


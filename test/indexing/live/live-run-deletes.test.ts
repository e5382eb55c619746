import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { type LiveFollower } from "../../../src/indexing/live/live-follower.js";
import { runGoodsIndexing } from "../../../src/indexing/modes.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";
import { commitChange, waitUntilSearchMatchesTable } from "../../support/live-changes.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { waitFor } from "../../support/wait.js";
import { deleteGoodsIndices, testFollower, testRunOptions } from "../helpers.js";

// A cursor or incremental run writes through the alias from one snapshot; the live follower
// removes a product deleted or taken off sale after that snapshot within a second. When the run
// sends the product's older state later than the live index remembers the delete
// (index.gc_deletes, 60 s; shortened here on the real index so the test takes seconds), nothing
// in Elasticsearch refuses it: the run itself must take it out again before it ends.

const es = createTestElasticsearch();
const alias = uniqueIndexName("goods_live_run_deletes");
let db: TestDatabase;
let follower: LiveFollower;

/** The live index forgets a delete's version after this long (a test setting on the real index). */
const GC_DELETES_MS = 500;
const BULK_SIZE = 50;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 300 });
  // Every product within an incremental run's window.
  await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "SYS_MOD_DTM" = now()`);
  follower = testFollower(db, es, alias);
  follower.start();
  await waitUntilSearchMatchesTable(db.knex, es, alias);
  await es.indices.putSettings({ index: alias, settings: { index: { gc_deletes: `${GC_DELETES_MS}ms` } } });
});

afterAll(async () => {
  await follower?.stop();
  await deleteGoodsIndices(es, alias);
  await db?.drop();
  await es.close();
});

async function searchable(goodsNo: string): Promise<boolean> {
  await es.indices.refresh({ index: alias });
  return (await es.search({ index: alias, query: { ids: { values: [goodsNo] } } })).hits.hits.length > 0;
}

/** The eligible products a sequential scan reads last: the run reaches them after its first bulk. */
async function readLast(count: number): Promise<string[]> {
  const { rows } = await db.knex.raw<{ rows: Array<{ GOODS_NO: string }> }>(
    `select "GOODS_NO" from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y' order by ctid desc limit ?`,
    [count],
  );
  return rows.map((r) => r.GOODS_NO);
}

describe("a run through the alias and the live follower's deletes", () => {
  it.each(["cursor", "incremental"] as const)(
    "keeps a product deleted and one taken off sale after the snapshot of the %s run out of search, however late the run sends them",
    async (mode) => {
      const [deleted, offSale] = (await readLast(2)) as [string, string];
      let acted = false;
      const result = await runGoodsIndexing({
        ...testRunOptions(db.knex, es, alias),
        mode,
        intervalMinutes: mode === "incremental" ? 60 : undefined,
        bulkSize: BULK_SIZE,
        bulksInFlight: 1,
        onBulkSettled: async (stats) => {
          // The first bulk of the pass that reads the products: the removal pass before it sends
          // fewer items than one bulk holds.
          if (acted || stats.total < BULK_SIZE) return;
          acted = true;
          // The run's cursor is open: its snapshot still has both products for sale.
          await commitChange(db.knex, "delete", deleted, "");
          await commitChange(db.knex, "off_sale", offSale, "");
          await waitFor(async () => !(await searchable(deleted)) && !(await searchable(offSale)), "the follower to remove both", 5_000, 50);
          // Past the live index's memory of the two deletes (pruned at a refresh after the window).
          await new Promise((resolve) => setTimeout(resolve, GC_DELETES_MS * 3));
          await es.indices.refresh({ index: alias });
        },
      });
      expect(acted).toBe(true);
      expect(result.fetchedCount).toBeGreaterThanOrEqual(250);
      expect(await searchable(deleted)).toBe(false);
      expect(await searchable(offSale)).toBe(false);
      await waitUntilSearchMatchesTable(db.knex, es, alias);
    },
    30_000,
  );
});

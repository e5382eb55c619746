import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { CLAIM_DUE_SQL, claimDue } from "../../../src/indexing/live/live-feed.js";
import { type LiveFollower } from "../../../src/indexing/live/live-follower.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";
import { goodsNo, waitUntilSearchMatchesTable } from "../../support/live-changes.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { waitFor } from "../../support/wait.js";
import { deleteGoodsIndices, testFollower } from "../helpers.js";

// Products Elasticsearch refuses wait out a backoff in the feed. One refused for good used to
// keep the feed's oldest-pending age growing ("fell behind" logged, "caught up" never), hiding
// the real lag behind it; and every claim walked past all the entries waiting out a backoff.

const es = createTestElasticsearch();
const alias = uniqueIndexName("goods_live_backoff");
let db: TestDatabase;
let follower: LiveFollower;
const logs: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 100 });
  follower = testFollower(db, es, alias, {
    logger: pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line).msg) }),
  });
  follower.start();
  await waitUntilSearchMatchesTable(db.knex, es, alias);
});

afterAll(async () => {
  await follower?.stop();
  await deleteGoodsIndices(es, alias);
  await db?.drop();
  await es.close();
});

describe("feed entries waiting out a backoff", () => {
  it("are reported apart from the lag: a product refused for good neither ages the feed nor makes it fall behind", async () => {
    // A keyword longer than Lucene's 32,766-byte term limit: refused as a document, every time.
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "ICON_INFO" = repeat('X', 40000) where "GOODS_NO" = ?`, [goodsNo(1)]);
    await waitFor(async () => (await follower.status()).retryingProducts === 1, "the product refused", 5_000, 50);
    // Past the 5 s after which a pending change counts as falling behind.
    await new Promise((resolve) => setTimeout(resolve, 6_000));
    expect(await follower.status()).toMatchObject({ pendingProducts: 1, retryingProducts: 1, oldestPendingAgeMs: 0 });
    expect(logs).not.toContain("live indexing fell behind");

    // A newer change of the product clears its backoff, and it is applied.
    await db.knex.raw(`update "PR_GOODS_SEARCH_INTF" set "ICON_INFO" = 'OK' where "GOODS_NO" = ?`, [goodsNo(1)]);
    await waitUntilSearchMatchesTable(db.knex, es, alias);
    expect(await follower.status()).toMatchObject({ pendingProducts: 0, retryingProducts: 0, oldestPendingAgeMs: 0 });
  }, 30_000);

  it("are not walked past by claims, which read only the entries that are due", async () => {
    // The follower would claim and apply the entries below itself, racing the claim this test reads.
    await follower.stop();
    // 20,000 refused products, older than anything else and waiting out a backoff; 5 changes behind them.
    await db.knex.raw(`insert into goods_live_feed (goods_no, change_id, changed_at, attempts, retry_at, last_error)
      select 'R' || n, n, now() - interval '1 hour', 10, now() + interval '10 minutes', '400 refused' from generate_series(1, 20000) n`);
    await db.knex.raw(`insert into goods_live_feed (goods_no, change_id, changed_at) select 'F' || n, n, now() from generate_series(1, 5) n`);
    await db.knex.raw(`analyze goods_live_feed`);

    const { rows } = await db.knex.raw(`explain (analyze, format json) ${CLAIM_DUE_SQL}`, { limit: 1000 });
    const plan = rows[0]["QUERY PLAN"][0].Plan as PlanNode;
    // Every row a scan of the feed read, whether it returned it or filtered it out.
    expect(rowsRead(plan)).toBeLessThanOrEqual(10);
    expect((await claimDue(db.knex, 1000)).map((e) => e.goodsNo).sort()).toEqual(["F1", "F2", "F3", "F4", "F5"]);
  });
});

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Actual Rows": number;
  "Actual Loops": number;
  "Rows Removed by Filter"?: number;
  "Rows Removed by Index Recheck"?: number;
  Plans?: PlanNode[];
}

function rowsRead(node: PlanNode): number {
  const own =
    node["Relation Name"] === "goods_live_feed"
      ? (node["Actual Rows"] + (node["Rows Removed by Filter"] ?? 0) + (node["Rows Removed by Index Recheck"] ?? 0)) * node["Actual Loops"]
      : 0;
  return own + (node.Plans ?? []).reduce((sum, child) => sum + rowsRead(child), 0);
}

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";
import { commitChange, goodsNo, pickKind, waitUntilSearchMatchesTable } from "../../support/live-changes.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { deleteGoodsIndices } from "../helpers.js";

// A full rebuild while live changes stream in (SPEC.md section 3): the rebuild reads a snapshot
// and moves the alias minutes later; every change committed after its snapshot must be in the
// new index when the alias moves (the follower writes into the build too), and no older state,
// above all no deleted product, may come back with the rebuild's late writes.

const es = createTestElasticsearch();
const alias = uniqueIndexName("goods_live_rebuild");
const ROWS = 20_000;
let db: TestDatabase;
let server: TestServer;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: ROWS, unusedEvery: 10 });
  // Small bulks, one at a time: the rebuild takes seconds, long enough for changes to race it.
  server = await startTestServer({
    knex: db.knex,
    elasticsearch: es,
    env: { DATABASE_URL: db.url, GOODS_INDEX: alias, INDEX_LIVE: "true", INDEX_BULK_SIZE: "100", INDEX_BULKS_IN_FLIGHT: "1", INDEX_FETCH_SIZE: "500" },
  });
  await waitUntilSearchMatchesTable(db.knex, es, alias, 60_000);
});

afterAll(async () => {
  await server?.close();
  await deleteGoodsIndices(es, alias);
  await db?.drop();
  await es.close();
});

describe("a full rebuild during live changes", () => {
  it("moves the alias to an index holding every change committed meanwhile, and brings no deleted product back", async () => {
    let writing = true;
    let next = ROWS + 1;
    const committed: Array<{ kind: string; goodsNo: string }> = [];
    const writer = (async () => {
      while (writing) {
        // The products the rebuild reads last are the ones most likely changed after their read.
        const existing = goodsNo(1 + Math.floor(Math.random() * ROWS));
        const change = await commitChange(db.knex, pickKind(), existing, goodsNo(next++));
        if (change) committed.push(change);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const before = Object.keys(await es.indices.getAlias({ name: alias }));
    const res = await fetch(`${server.url}/api/search/v1/index/db/goods`);
    const body = (await res.json()) as Record<string, unknown>;
    const duringRebuild = committed.length;
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    writing = false;
    await writer;

    expect(res.status).toBe(200);
    expect(body).toMatchObject({ success: true, mode: "full" });
    expect(Object.keys(await es.indices.getAlias({ name: alias }))).not.toEqual(before);
    // Enough changes raced the rebuild to mean something, deletes and off-sales among them.
    expect(duringRebuild).toBeGreaterThan(100);
    expect(committed.filter((c) => c.kind === "delete").length).toBeGreaterThan(0);
    expect(committed.filter((c) => c.kind === "off_sale").length).toBeGreaterThan(0);

    await waitUntilSearchMatchesTable(db.knex, es, alias, 60_000);
    // No build left behind: only the live index carries the alias's name pattern.
    const indices = Object.keys(await es.indices.get({ index: `${alias}_*` }));
    expect(indices).toEqual(Object.keys(await es.indices.getAlias({ name: alias })));
  }, 180_000);
});

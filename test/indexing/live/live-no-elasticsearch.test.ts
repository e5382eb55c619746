import { afterAll, beforeAll, expect, it } from "vitest";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { spawnService, type ServiceProcess } from "../../support/spawn-service.js";
import { waitFor } from "../../support/wait.js";

// A first start with Elasticsearch not up yet (nothing listens on its port): the follower cannot
// prepare the alias's first index. It waits, in state waiting_for_elasticsearch, with one warning,
// not an error line every few seconds.

let db: TestDatabase;
let service: ServiceProcess;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 50 });
  service = await spawnService({ DATABASE_URL: db.url, ELASTICSEARCH_URL: "http://127.0.0.1:1", INDEX_LIVE: "true" });
});

afterAll(async () => {
  await service?.stop("SIGTERM");
  await db?.drop();
});

it("waits for an Elasticsearch that is not up with one warning, keeping the feed", async () => {
  // The status answers 503 (no Elasticsearch to count documents in); the metrics carry the state.
  const metrics = () => fetch(`${service.url}/metrics`).then((res) => res.text());
  await waitFor(async () => /^indexing_live_state\{state="waiting_for_elasticsearch"\} 1$/m.test(await metrics()), "the follower waiting for Elasticsearch", 15_000, 200);
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  expect(service.logs.filter((line) => line.msg === "Elasticsearch is unavailable: live changes wait in the feed")).toHaveLength(1);
  expect(service.logs.filter((line) => (line.level as number) >= 50)).toEqual([]);
  const { rows } = await db.knex.raw(`select count(*)::int as n from goods_live_feed`);
  expect(rows[0].n).toBe(50);
});

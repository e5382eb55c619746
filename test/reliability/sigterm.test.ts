import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { indexSettings, deleteGoodsIndices } from "../indexing/helpers.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { spawnService, type ServiceProcess } from "../support/spawn-service.js";
import { waitFor } from "../support/wait.js";
import { documentsWritten } from "./helpers.js";

// SIGTERM while a full index runs: the job stops at a safe point, the index gets refresh 1s /
// replicas 1 back, the pools close and the process exits 0.

const ROWS = 100_000;

const es = createTestElasticsearch();
const index = uniqueIndexName("goods_sigterm");
let db: TestDatabase;
let service: ServiceProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: ROWS, unusedEvery: 10 });
});

afterAll(async () => {
  await service?.stop("SIGKILL");
  await deleteGoodsIndices(es, index);
  await db?.drop();
  await es.close();
});

describe("SIGTERM during a full index", () => {
  it("exits 0, answers the interrupted request 503 and deletes its partial index", async () => {
    service = await spawnService({
      DATABASE_URL: db.url,
      ELASTICSEARCH_URL: elasticsearchUrl(),
      GOODS_INDEX: index,
      INDEX_BULK_SIZE: "1000",
      INDEX_FETCH_SIZE: "5000",
      // The live follower would index the generated rows into an index of its own before the
      // rebuild starts; this test is about the rebuild's partial index alone.
      INDEX_LIVE: "false",
    });
    const run = fetch(`${service.url}/api/search/v1/index/db/goods`).then(async (res) => ({
      status: res.status,
      body: (await res.json()) as Record<string, unknown>,
    }));
    await waitFor(async () => (await documentsWritten(es, index)) > 0, "the first documents to be written");
    // The rebuild writes a physical index tuned for bulk; the alias does not exist yet.
    expect(await indexSettings(es, `${index}_*`)).toEqual({ refresh: "-1", replicas: "0" });
    expect(await es.indices.existsAlias({ name: index })).toBe(false);

    expect(await service.stop("SIGTERM")).toEqual({ code: 0, signal: null });

    // Stopped before its swap: the partial index is deleted and no alias points anywhere.
    expect(Object.keys(await es.indices.get({ index: `${index}_*`, allow_no_indices: true }))).toEqual([]);
    expect(await es.indices.existsAlias({ name: index })).toBe(false);
    const messages = service.logs.map((entry) => entry.msg);
    expect(messages).toContain("shutting down");
    expect(messages.at(-1)).toBe("stopped");
    // In-flight requests are answered before the server closes: this one says it did not complete.
    const answer = await run;
    expect(answer.status).toBe(503);
    expect(answer.body.detail).toBe("full indexing stopped before it finished: shutting down; run it again");
  }, 90_000);
});

import { Client } from "@elastic/elasticsearch";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { IndexingError } from "../../src/indexing/indexing-error.js";
import { runGoodsIndexing } from "../../src/indexing/modes.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { documentCount, indexSettings, testRunOptions, deleteGoodsIndices } from "./helpers.js";

let db: TestDatabase;
const es = createTestElasticsearch();
const indices: string[] = [];

function newIndex(): string {
  const name = uniqueIndexName("goods_full");
  indices.push(name);
  return name;
}

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 1000, unusedEvery: 10 });
});

afterAll(async () => {
  await deleteGoodsIndices(es, ...indices);
  await db?.drop();
  await es.close();
});

describe("full mode", () => {
  it("indexes exactly the USE_YN='Y' rows, field by field, and leaves refresh 1s / replicas 1", async () => {
    const index = newIndex();
    const result = await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "full" });

    expect(result).toMatchObject({ mode: "full", fetchedCount: 900, indexedCount: 900, failedCount: 0 });
    expect(await documentCount(es, index)).toBe(900);
    expect(await indexSettings(es, index)).toEqual({ refresh: "1s", replicas: "1" });

    const unused = await db.knex("PR_GOODS_SEARCH_INTF").where({ USE_YN: "N" }).select("GOODS_NO");
    const { docs: unusedDocs } = await es.mget({ index, ids: unused.map((r) => r.GOODS_NO as string) });
    expect(unusedDocs.every((d) => !("found" in d) || !d.found)).toBe(true);

    const sample = await db.knex("PR_GOODS_SEARCH_INTF").where({ USE_YN: "Y" }).orderByRaw(`md5("GOODS_NO")`).limit(25);
    const { docs } = await es.mget<Record<string, unknown>>({ index, ids: sample.map((r) => r.GOODS_NO as string) });
    sample.forEach(({ INDEX_VERSION, ...row }, i) => {
      const expected = { ...row, SYS_REG_DTM: row.SYS_REG_DTM.toISOString(), SYS_MOD_DTM: row.SYS_MOD_DTM.toISOString() };
      expect((docs[i] as { _source?: unknown })._source).toEqual(expected);
      // The row's version is the document's external version, not a field of it.
      expect(String((docs[i] as { _version?: number })._version)).toBe(INDEX_VERSION);
    });
  });

  it("creates the index with the explicit mapping: codes and flags keyword, names text, prices numeric, dates", async () => {
    const index = newIndex();
    await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "full" });
    // Keyed by the physical index behind the alias.
    const mapping = Object.values(await es.indices.getMapping({ index }))[0]?.mappings.properties ?? {};
    expect(mapping.USE_YN?.type).toBe("keyword");
    expect(mapping.GOODS_NO?.type).toBe("keyword");
    expect(mapping.CATE_CD?.type).toBe("keyword");
    expect(mapping.GOODS_NM?.type).toBe("text");
    expect(mapping.SALE_PRICE?.type).toBe("long");
    expect(mapping.SYS_MOD_DTM?.type).toBe("date");
  });

  it("leaves the alias on the previous index and deletes its partial index when Elasticsearch breaks midway (BULK_FAILED)", async () => {
    const index = newIndex();
    await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "full" });
    const before = await physicalIndices(index);
    const proxy = await startTcpProxy(elasticsearchUrl());
    const client = new Client({ node: proxy.url, maxRetries: 0, requestTimeout: 10_000 });
    try {
      const run = runGoodsIndexing({
        ...testRunOptions(db.knex, client, index),
        mode: "full",
        onBulkSettled: (stats) => {
          if (stats.bulks === 3) proxy.severNext();
        },
      });
      const error = await run.catch((err: unknown) => err);
      expect(error).toBeInstanceOf(IndexingError);
      expect((error as IndexingError).code).toBe("BULK_FAILED");
      expect(proxy.severedNext).toBe(1);
      expect(Object.keys(await es.indices.getAlias({ name: index }))).toEqual(before);
      expect(await physicalIndices(index)).toEqual(before);
      expect(await documentCount(es, index)).toBe(900);
    } finally {
      await client.close();
      await proxy.close();
    }
  });

  it("replaces an older install's concrete index of the alias's name in place, with its data", async () => {
    const index = newIndex();
    await es.indices.create({ index });
    await es.index({ index, id: "STALE", document: { GOODS_NO: "STALE" }, refresh: true });

    await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "full" });

    expect(await es.indices.existsAlias({ name: index })).toBe(true);
    const [physical] = Object.keys(await es.indices.getAlias({ name: index }));
    expect(physical).toMatch(new RegExp(`^${index}_\\d{14}$`));
    expect(await documentCount(es, index)).toBe(900);
    expect(await es.exists({ index, id: "STALE" })).toBe(false);
  });

  it("fails with ALIAS_SWAP_FAILED, keeps the concrete index it could not replace and leaves no partial index", async () => {
    const index = newIndex();
    await es.indices.create({ index, settings: { "index.blocks.read_only": true } });
    try {
      const error = await runGoodsIndexing({ ...testRunOptions(db.knex, es, index), mode: "full" }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(IndexingError);
      expect((error as IndexingError).code).toBe("ALIAS_SWAP_FAILED");
      expect(await es.indices.existsAlias({ name: index })).toBe(false);
      expect(await physicalIndices(index)).toEqual([]);
    } finally {
      await es.indices.putSettings({ index, settings: { "index.blocks.read_only": false } });
    }
  });
});

/** The physical indices of the alias's naming pattern, whether the alias points to them or not. */
async function physicalIndices(alias: string): Promise<string[]> {
  const found = await es.indices.get({ index: `${alias}_*`, allow_no_indices: true });
  return Object.keys(found).sort();
}

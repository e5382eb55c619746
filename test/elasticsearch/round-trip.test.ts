import { afterAll, describe, expect, it } from "vitest";
import { createTestElasticsearch, uniqueIndexName } from "../support/elasticsearch.js";

const es = createTestElasticsearch();
const index = uniqueIndexName("roundtrip");

afterAll(async () => {
  await es.indices.delete({ index, ignore_unavailable: true });
  await es.close();
});

describe("the real Elasticsearch", () => {
  it("is an 8.x node", async () => {
    const health = await es.cluster.health();
    expect(["green", "yellow"]).toContain(health.status);
    const nodes = await es.nodes.info({ metric: "process" });
    const versions = Object.values(nodes.nodes).map((n) => n.version);
    expect(versions.every((v) => v.startsWith("8."))).toBe(true);
  });

  it("bulk-indexes documents and finds them by search", async () => {
    await es.indices.create({
      index,
      mappings: { properties: { GOODS_NM: { type: "text" }, USE_YN: { type: "keyword" }, SALE_PRICE: { type: "long" } } },
    });
    const docs = Array.from({ length: 50 }, (_, i) => ({
      GOODS_NO: `G${i}`,
      GOODS_NM: i % 2 === 0 ? `red shirt ${i}` : `blue jeans ${i}`,
      USE_YN: i % 5 === 0 ? "N" : "Y",
      SALE_PRICE: 1000 + i,
    }));
    const bulk = await es.bulk({ refresh: true, operations: docs.flatMap((d) => [{ index: { _index: index, _id: d.GOODS_NO } }, d]) });
    expect(bulk.errors).toBe(false);

    const result = await es.search<{ GOODS_NO: string }>({
      index,
      size: 100,
      query: { bool: { must: [{ match: { GOODS_NM: "shirt" } }], filter: [{ term: { USE_YN: "Y" } }] } },
    });
    const expected = docs.filter((d) => d.GOODS_NM.includes("shirt") && d.USE_YN === "Y").map((d) => d.GOODS_NO);
    expect(result.hits.hits.map((h) => h._source!.GOODS_NO).sort()).toEqual(expected.sort());
  });
});

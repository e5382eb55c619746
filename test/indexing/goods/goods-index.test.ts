import { afterAll, describe, expect, it } from "vitest";
import { aliasState, buildingAlias, createBuildIndex, ensureGoodsAlias } from "../../../src/indexing/goods/goods-index.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";
import { deleteGoodsIndices, silentLogger } from "../helpers.js";

// The physical indices behind the alias are named by the second they were created in: two
// creators in the same second (the live follower's first index on a fresh install, and a rebuild
// asked for at once) must each get an index of their own, not a 500.

const es = createTestElasticsearch();
const aliases: string[] = [];

afterAll(async () => {
  for (const alias of aliases) await deleteGoodsIndices(es, alias);
  await es.close();
});

describe("the goods index's physical names", () => {
  it("gives the first index behind the alias and a rebuild's index, created at once, a name each", async () => {
    const alias = uniqueIndexName("goods_names");
    aliases.push(alias);
    const [, build] = await Promise.all([ensureGoodsAlias(es, alias, "cjk", silentLogger), createBuildIndex(es, alias, "cjk", silentLogger)]);

    const state = await aliasState(es, alias);
    expect(state.kind).toBe("alias");
    const live = state.kind === "alias" ? state.indices : [];
    expect(live).toHaveLength(1);
    expect(live[0]).not.toBe(build);
    expect(Object.keys(await es.indices.getAlias({ name: buildingAlias(alias) }))).toEqual([build]);
  });
});

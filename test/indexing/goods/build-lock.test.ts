import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKnex } from "../../../src/db/knex.js";
import { whileBuildStays, whileNoBuildWrite } from "../../../src/indexing/goods/build-lock.js";
import { generateGoods } from "../../../src/indexing/goods/goods-generator.js";
import { buildingAlias, buildInProgress, createBuildIndex, ensureGoodsAlias, swapAlias } from "../../../src/indexing/goods/goods-index.js";
import { runGoodsIndexing } from "../../../src/indexing/modes.js";
import { createTestElasticsearch, uniqueIndexName } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { deleteGoodsIndices, documentCount, silentLogger, testRunOptions } from "../helpers.js";

// The live follower writes each change into a build through its building alias once it has seen
// the alias; a build going live removes that alias. Elasticsearch applies require_alias to
// upserts only: a delete at an external version addressed to an alias that just went away creates
// an empty index of the alias's name, and that index then refuses every later build its alias.
// So the look-then-write and the alias's removal exclude each other (build-lock.ts), and a run
// deletes such an index left by a version without the lock.

const es = createTestElasticsearch();
const aliases: string[] = [];
let db: TestDatabase;

function newAlias(): string {
  const alias = uniqueIndexName("goods_build_lock");
  aliases.push(alias);
  return alias;
}

/** What the follower sends for a deleted product: a delete at its external version, only to an alias. */
async function versionedDelete(index: string): Promise<void> {
  const body = `${JSON.stringify({ delete: { _id: "G1", version: 7, version_type: "external" } })}\n`;
  await es.bulk({ index, require_alias: true, body } as never);
}

async function indexExists(name: string): Promise<boolean> {
  return es.indices.exists({ index: name });
}

const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  db = await createTestDatabase();
  await generateGoods(db.knex, { rows: 300, unusedEvery: 10 });
});

afterAll(async () => {
  await deleteGoodsIndices(es, ...aliases);
  await db?.drop();
  await es.close();
});

describe("the building alias and live writes", () => {
  it("is the reason for the lock: a versioned delete to a building alias that went away creates an index of its name", async () => {
    const alias = newAlias();
    await versionedDelete(buildingAlias(alias));
    expect(await indexExists(buildingAlias(alias))).toBe(true);
  });

  it("keeps a build from going live while a writer is between seeing its building alias and writing through it", async () => {
    const alias = newAlias();
    await ensureGoodsAlias(es, alias, "cjk", silentLogger);
    const build = await createBuildIndex(es, alias, "cjk", silentLogger);

    let writerSaw: boolean | undefined;
    let letWriterFinish!: () => void;
    const writerMayFinish = new Promise<void>((resolve) => (letWriterFinish = resolve));
    const writer = whileBuildStays(db.knex, alias, async () => {
      writerSaw = await buildInProgress(es, alias);
      await writerMayFinish;
      if (writerSaw) await versionedDelete(buildingAlias(alias));
    });
    while (writerSaw === undefined) await settle(10);

    let swapped = false;
    const swap = whileNoBuildWrite(db.knex, alias, async () => {
      await swapAlias(es, alias, build);
      swapped = true;
    });
    await settle(500);
    expect(swapped).toBe(false);

    letWriterFinish();
    await Promise.all([writer, swap]);
    expect(swapped).toBe(true);
    expect(Object.keys(await es.indices.getAlias({ name: alias }))).toEqual([build]);
    // The writer's delete went into the build while it was one; no index took the alias's name.
    expect(await indexExists(buildingAlias(alias))).toBe(false);
  });

  it("makes a writer that comes while a build goes live wait, and then find no build to write to", async () => {
    const alias = newAlias();
    await ensureGoodsAlias(es, alias, "cjk", silentLogger);
    const build = await createBuildIndex(es, alias, "cjk", silentLogger);

    let letSwapFinish!: () => void;
    const swapMayFinish = new Promise<void>((resolve) => (letSwapFinish = resolve));
    let swapHolds = false;
    const swap = whileNoBuildWrite(db.knex, alias, async () => {
      swapHolds = true;
      await swapMayFinish;
      await swapAlias(es, alias, build);
    });
    while (!swapHolds) await settle(10);

    let writerSaw: boolean | undefined;
    const writer = whileBuildStays(db.knex, alias, async () => {
      writerSaw = await buildInProgress(es, alias);
    });
    await settle(500);
    expect(writerSaw).toBeUndefined();

    letSwapFinish();
    await Promise.all([swap, writer]);
    expect(writerSaw).toBe(false);
  });

  it("lets writers through together", async () => {
    const alias = newAlias();
    let inside = 0;
    let most = 0;
    const writer = () =>
      whileBuildStays(db.knex, alias, async () => {
        inside += 1;
        most = Math.max(most, inside);
        await settle(200);
        inside -= 1;
      });
    await Promise.all([writer(), writer()]);
    expect(most).toBe(2);
  });

  it("holds a writer's lock through a write longer than idle_in_transaction_session_timeout", async () => {
    const alias = newAlias();
    // Where the database kills sessions idle in a transaction: a lock held in a transaction across
    // Elasticsearch requests was dropped in the middle of the write it protects.
    await db.knex.raw(`alter database ${db.name} set idle_in_transaction_session_timeout = '300ms'`);
    const knex = createKnex(db.url, { poolMax: 2 });
    try {
      let rebuildGotIn: boolean | undefined;
      const written = await whileBuildStays(knex, alias, async () => {
        // As long as a bulk request with its 429 backoff, then a rebuild tries to go live.
        await settle(1_000);
        const { rows } = await db.knex.raw(`select pg_try_advisory_lock(hashtext(?)) as locked`, [`goods_index.build:${alias}`]);
        rebuildGotIn = rows[0].locked as boolean;
        if (rebuildGotIn) await db.knex.raw(`select pg_advisory_unlock(hashtext(?))`, [`goods_index.build:${alias}`]);
        return "written";
      });
      expect(rebuildGotIn).toBe(false);
      expect(written).toBe("written");
    } finally {
      await knex.destroy();
      await db.knex.raw(`alter database ${db.name} reset idle_in_transaction_session_timeout`);
    }
  });

  it("deletes an index of the building alias's name left by an earlier version, and the rebuild then goes live", async () => {
    const alias = newAlias();
    await runGoodsIndexing({ ...testRunOptions(db.knex, es, alias), mode: "full" });
    await versionedDelete(buildingAlias(alias));
    expect(await indexExists(buildingAlias(alias))).toBe(true);

    const result = await runGoodsIndexing({ ...testRunOptions(db.knex, es, alias), mode: "full" });

    expect(result).toMatchObject({ mode: "full", indexedCount: 270, failedCount: 0 });
    expect(await indexExists(buildingAlias(alias))).toBe(false);
    expect(await documentCount(es, alias)).toBe(270);
  });
});

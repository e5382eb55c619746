import { Client } from "@elastic/elasticsearch";
import { afterAll, describe, expect, it } from "vitest";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { deleteGoodsIndices } from "../indexing/helpers.js";
import { createTestElasticsearch, elasticsearchUrl, uniqueIndexName } from "../support/elasticsearch.js";
import { commitChange, goodsNo, pickKind, waitUntilSearchMatchesTable } from "../support/live-changes.js";
import { createTestDatabase, type TestDatabase } from "../support/postgres.js";
import { startTestServer } from "../support/server.js";
import { spawnService, type ServiceProcess } from "../support/spawn-service.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { waitFor } from "../support/wait.js";

// Live changes through faults (SPEC.md section 3): Elasticsearch cut under a steady write load,
// the following process SIGKILLed mid-stream, and two replicas of which exactly one follows.
// Each ends with search equal to the table, every product at its row's version, the feed empty.

const ROWS = 2_000;
const es = createTestElasticsearch();
const aliases: string[] = [];
const databases: TestDatabase[] = [];
const services: ServiceProcess[] = [];

afterAll(async () => {
  await Promise.all(services.map((service) => service.stop("SIGKILL")));
  await deleteGoodsIndices(es, ...aliases);
  await Promise.all(databases.map((db) => db.drop()));
  await es.close();
});

async function goodsDatabase(): Promise<TestDatabase> {
  const db = await createTestDatabase();
  databases.push(db);
  await generateGoods(db.knex, { rows: ROWS, unusedEvery: 10 });
  return db;
}

function newAlias(): string {
  const alias = uniqueIndexName("goods_live_faults");
  aliases.push(alias);
  return alias;
}

/** Commits mixed changes, one every `everyMs`, until stopped; returns how many it committed. */
function startWriter(db: TestDatabase, everyMs: number) {
  let writing = true;
  let next = 100_000 + Math.floor(Math.random() * 1_000_000);
  let committed = 0;
  const done = (async () => {
    while (writing) {
      const change = await commitChange(db.knex, pickKind(), goodsNo(1 + Math.floor(Math.random() * ROWS)), goodsNo(next++));
      if (change) committed++;
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return {
    get committed() {
      return committed;
    },
    async stop() {
      writing = false;
      await done;
    },
  };
}

async function liveStatus(url: string): Promise<{ state: string; pending_products: number }> {
  const res = await fetch(`${url}/api/search/v1/index/db/goods/status`);
  const body = (await res.json()) as { live: { state: string; pending_products: number } };
  return body.live;
}

/** The feed's size, read from the table while Elasticsearch is away. */
async function livePending(db: TestDatabase): Promise<number> {
  const { rows } = await db.knex.raw(`select count(*)::int as n from goods_live_feed`);
  return rows[0].n as number;
}

describe("live changes through faults", () => {
  it("waits out Elasticsearch cut for 15 s under a steady write load, then drains: nothing lost", async () => {
    const db = await goodsDatabase();
    const alias = newAlias();
    const proxy = await startTcpProxy(elasticsearchUrl());
    const client = new Client({ node: proxy.url, requestTimeout: 60_000, maxRetries: 2 });
    const server = await startTestServer({ knex: db.knex, elasticsearch: client, env: { DATABASE_URL: db.url, GOODS_INDEX: alias, INDEX_LIVE: "true" } });
    try {
      await waitUntilSearchMatchesTable(db.knex, es, alias);
      const writer = startWriter(db, 20);
      await waitFor(() => writer.committed > 50, "changes flowing");
      proxy.sever();
      const cutAt = Date.now();
      // The status answers 503 while Elasticsearch is away (it counts the index): the metrics tell.
      await waitFor(async () => /^indexing_live_state\{state="waiting_for_elasticsearch"\} 1$/m.test(await metrics(server.url)), "the follower waiting for Elasticsearch", 15_000, 200);
      await waitFor(() => Date.now() - cutAt >= 15_000, "15 s of cut", 20_000, 200);
      const pendingDuringCut = await livePending(db);
      proxy.restore();
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      await writer.stop();

      expect(pendingDuringCut).toBeGreaterThan(50);
      await waitUntilSearchMatchesTable(db.knex, es, alias, 60_000);
      const status = await fetch(`${server.url}/api/search/v1/index/db/goods/status`).then((res) => res.json() as Promise<Record<string, unknown>>);
      expect(status.drift ?? 0).toBe(0);
      expect(status.live).toMatchObject({ state: "following", pending_products: 0 });
    } finally {
      await server.close();
      await client.close();
      await proxy.close();
    }
  }, 120_000);

  it("two replicas: exactly one follows; SIGKILLed mid-stream, the other takes over within seconds, nothing lost or out of order", async () => {
    const db = await goodsDatabase();
    const alias = newAlias();
    const env = { DATABASE_URL: db.url, ELASTICSEARCH_URL: elasticsearchUrl(), GOODS_INDEX: alias, CRON_ENABLED: "false" };
    const first = await spawnService(env);
    services.push(first);
    await waitFor(async () => (await liveStatus(first.url)).state === "following", "the first replica following", 20_000, 100);
    const second = await spawnService(env);
    services.push(second);
    await waitFor(async () => (await liveStatus(second.url)).state === "standby", "the second replica on standby", 20_000, 100);
    expect((await liveStatus(first.url)).state).toBe("following");

    const writer = startWriter(db, 5);
    await waitFor(() => writer.committed > 200, "changes flowing", 30_000);
    await first.stop("SIGKILL");
    const killedAt = Date.now();
    await waitFor(async () => (await liveStatus(second.url)).state === "following", "the second replica following", 10_000, 100);
    const takeoverMs = Date.now() - killedAt;
    await waitFor(() => writer.committed > 400, "more changes after the kill", 30_000);

    // The killed one comes back and stands by.
    const third = await spawnService(env);
    services.push(third);
    await waitFor(async () => (await liveStatus(third.url)).state === "standby", "the restarted replica on standby", 20_000, 100);
    await writer.stop();

    expect(takeoverMs).toBeLessThan(5_000);
    await waitUntilSearchMatchesTable(db.knex, es, alias, 60_000);
  }, 180_000);
});

function metrics(url: string): Promise<string> {
  return fetch(`${url}/metrics`).then((res) => res.text());
}

import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import pino from "pino";
import type { GoodsIndexingOptions } from "../../src/indexing/modes.js";
import { createLiveFollower, type LiveFollower, type LiveFollowerOptions } from "../../src/indexing/live/live-follower.js";

export const silentLogger = pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });

/** Small sizes so that a few hundred rows cross many fetches and bulks. */
export function testRunOptions(knex: Knex, elasticsearch: Client, index: string): Omit<GoodsIndexingOptions, "mode"> {
  return { knex, elasticsearch, logger: silentLogger, index, fetchSize: 100, bulkSize: 50, bulkMaxBytes: 1024 * 1024, bulksInFlight: 2 };
}

export async function indexSettings(client: Client, index: string): Promise<{ refresh: string | undefined; replicas: string | undefined }> {
  const response = await client.indices.getSettings({ index });
  // Keyed by the physical index, whether `index` names it or an alias pointing to it.
  const settings = Object.values(response)[0]?.settings?.index;
  return { refresh: settings?.refresh_interval as string | undefined, replicas: settings?.number_of_replicas as string | undefined };
}

export async function documentCount(client: Client, index: string): Promise<number> {
  await client.indices.refresh({ index });
  return (await client.count({ index })).count;
}

export async function flagCounts(knex: Knex): Promise<Record<string, number>> {
  const { rows } = await knex.raw<{ rows: Array<{ flag: string; n: number }> }>(
    `select "INDEX_YN" as flag, count(*)::int as n from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y' group by 1`,
  );
  return Object.fromEntries(rows.map((r) => [r.flag, r.n]));
}

export async function flagOf(knex: Knex, goodsNo: string): Promise<string> {
  const row = await knex("PR_GOODS_SEARCH_INTF").where({ GOODS_NO: goodsNo }).first("INDEX_YN");
  return row.INDEX_YN as string;
}

/** Sessions of the database other than the asking one, as pg_stat_activity sees them. */
export async function otherSessions(knex: Knex): Promise<Array<{ state: string; query: string }>> {
  const { rows } = await knex.raw<{ rows: Array<{ state: string; query: string }> }>(
    `select state, query from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`,
  );
  return rows;
}

/** Deletes a goods alias's indices: the physical ones behind it or left by builds, or an older concrete one. */
export async function deleteGoodsIndices(client: Client, ...aliases: string[]): Promise<void> {
  for (const alias of aliases) {
    const found = await client.indices.get({ index: [alias, `${alias}_*`], allow_no_indices: true, ignore_unavailable: true });
    const names = Object.keys(found);
    if (names.length > 0) await client.indices.delete({ index: names, ignore_unavailable: true });
  }
}

/** A live follower of the test database's feed into `alias`, polling every 200 ms; `overrides` as the test needs. */
export function testFollower(
  db: { knex: Knex; url: string },
  elasticsearch: Client,
  alias: string,
  overrides: Partial<LiveFollowerOptions> = {},
): LiveFollower {
  return createLiveFollower({
    knex: db.knex,
    elasticsearch,
    logger: silentLogger,
    enabled: true,
    databaseUrl: db.url,
    alias,
    analyzer: "cjk",
    bulkMaxBytes: 1024 * 1024,
    pollMs: 200,
    ...overrides,
  });
}

import type { Client } from "@elastic/elasticsearch";
import type { Knex } from "knex";
import pino from "pino";
import type { GoodsIndexingOptions } from "../../src/indexing/modes.js";

export const silentLogger = pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });

/** Small sizes so that a few hundred rows cross many fetches and bulks. */
export function testRunOptions(knex: Knex, elasticsearch: Client, index: string): Omit<GoodsIndexingOptions, "mode"> {
  return { knex, elasticsearch, logger: silentLogger, index, fetchSize: 100, bulkSize: 50, bulkMaxBytes: 1024 * 1024, bulksInFlight: 2 };
}

export async function indexSettings(client: Client, index: string): Promise<{ refresh: string | undefined; replicas: string | undefined }> {
  const response = await client.indices.getSettings({ index });
  const settings = response[index]?.settings?.index;
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

/**
 * An HTTP proxy in front of Elasticsearch that answers the first `throttledBulks` bulk requests
 * itself, as an overloaded cluster would: every item 429. Everything else is forwarded.
 */
export async function startThrottlingProxy(target: string, throttledBulks: number): Promise<{ url: string; throttled: number; close(): Promise<void> }> {
  const { createServer: createHttpServer } = await import("node:http");
  const state = { throttled: 0 };
  const server = createHttpServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    if (req.url?.includes("/_bulk") && state.throttled < throttledBulks) {
      state.throttled++;
      const actions = body.toString("utf8").split("\n").filter((line, i) => i % 2 === 0 && line !== "");
      const items = actions.map((line) => ({
        index: { _id: (JSON.parse(line) as { index: { _id: string } }).index._id, status: 429, error: { type: "es_rejected_execution_exception", reason: "queue full" } },
      }));
      res.writeHead(200, { "content-type": "application/json", "x-elastic-product": "Elasticsearch" });
      res.end(JSON.stringify({ took: 1, errors: true, items }));
      return;
    }
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([name]) => !["host", "content-length", "connection"].includes(name))) as Record<string, string>;
    const upstream = await fetch(`${target}${req.url}`, { method: req.method, headers, body: ["GET", "HEAD"].includes(req.method ?? "") ? undefined : body });
    // fetch has already decoded the body, so its encoding and length headers no longer apply.
    const responseHeaders = Object.fromEntries([...upstream.headers].filter(([name]) => !["content-encoding", "content-length"].includes(name)));
    res.writeHead(upstream.status, responseHeaders);
    res.end(Buffer.from(await upstream.arrayBuffer()));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    get throttled() {
      return state.throttled;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

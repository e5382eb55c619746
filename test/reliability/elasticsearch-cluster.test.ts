import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Client } from "@elastic/elasticsearch";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createElasticsearchClient, splitNodeUrls } from "../../src/elasticsearch-client.js";
import { documentCount, indexSettings } from "../indexing/helpers.js";
import { uniqueIndexName } from "../support/elasticsearch.js";
import type { TestDatabase } from "../support/postgres.js";
import type { TestServer } from "../support/server.js";
import { waitFor } from "../support/wait.js";
import { createGoodsDatabase, documentsWritten, indexGoods, removeGoods, startIndexingServer } from "./helpers.js";

// A two-node cluster started by scripts/elasticsearch.sh under its own state directory: node 1 is
// the only master-eligible node (it stays), node 2 holds data only and is killed mid full-index.
// The server knows both nodes, as a comma-separated ELASTICSEARCH_URL gives them.

const script = join(import.meta.dirname, "../../scripts/elasticsearch.sh");
const run = promisify(execFile);
const ROWS = 10_000;
const ELIGIBLE = ROWS - ROWS / 10;

const state = mkdtempSync(join(tmpdir(), "es-cluster-"));
const env = { ...process.env, ES_STATE_DIR: state, ES_HEAP: "512m" };
const index = uniqueIndexName("goods_cluster");
let es: Client | undefined;
let db: TestDatabase | undefined;
let serverClient: Client | undefined;
let server: TestServer;

beforeAll(async () => {
  const { stdout } = await run(script, ["start-cluster", "2"], { env, timeout: 300_000 });
  const urls = stdout.trim();
  expect(splitNodeUrls(urls)).toHaveLength(2);
  // Assertions go to the node that stays.
  es = new Client({ node: splitNodeUrls(urls)[0]!, requestTimeout: 90_000 });
  db = await createGoodsDatabase(ROWS);
  serverClient = createElasticsearchClient(urls);
  server = await startIndexingServer(db, serverClient, { index, bulkSize: 200, fetchSize: 1000 });
}, 360_000);

afterAll(async () => {
  try {
    await server?.close();
    await serverClient?.close();
    if (es) await removeGoods(es, index, db);
  } finally {
    await run(script, ["stop"], { env, timeout: 120_000 });
    rmSync(state, { recursive: true, force: true });
  }
}, 180_000);

/** The physical indices of the goods index, and the one its alias points to. */
async function goodsIndices(client: Client): Promise<{ all: string[]; aliased: string[] }> {
  const all = Object.keys(await client.indices.get({ index: `${index}_*` })).sort();
  const aliased = Object.keys(await client.indices.getAlias({ name: index }));
  return { all, aliased };
}

describe("a two-node Elasticsearch cluster", () => {
  it("indexes every eligible row with the goods index green, its replica on the other node", async () => {
    const full = await indexGoods(server);
    expect(full.status).toBe(200);
    expect(full.body).toMatchObject({ success: true, mode: "full", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(await documentCount(es!, index)).toBe(ELIGIBLE);
    expect(await indexSettings(es!, index)).toEqual({ refresh: "1s", replicas: "1" });
    const health = await es!.cluster.health({ index, wait_for_status: "green", timeout: "60s" });
    expect(health).toMatchObject({ status: "green", number_of_nodes: 2, timed_out: false });
    expect(health.active_shards).toBe(2 * health.active_primary_shards);
  }, 240_000);

  it("losing the data node mid full-index finishes the run or fails it cleanly, and the next run indexes every row", async () => {
    const before = await goodsIndices(es!);
    expect(before.all).toEqual(before.aliased);

    const baseline = await documentsWritten(es!, index);
    let answered = false;
    const full = indexGoods(server).finally(() => (answered = true));
    // About ten bulks of 200 documents in: well under way, far from its end.
    await waitFor(async () => (await documentsWritten(es!, index)) - baseline >= 2_000, "ten bulks written", 120_000, 50);
    const writtenAtKill = (await documentsWritten(es!, index)) - baseline;
    // A crash, not a shutdown: the node gets no chance to hand anything over.
    process.kill(Number(readFileSync(join(state, "node-2/pid"), "utf8")), "SIGKILL");
    // The kill came mid-run: the run had not answered yet and had not written every row.
    expect(answered).toBe(false);
    expect(writtenAtKill).toBeLessThan(ELIGIBLE);
    const cut = await full;

    const after = await goodsIndices(es!);
    // Either way exactly one physical index is left, the alias points to it, its settings are restored.
    expect(after.all).toEqual(after.aliased);
    expect(await indexSettings(es!, index)).toEqual({ refresh: "1s", replicas: "1" });
    if (cut.status === 200) {
      expect(cut.body).toMatchObject({ success: true, fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
      expect(after.aliased).not.toEqual(before.aliased);
    } else {
      expect(cut.status).toBe(503);
      expect(after.aliased).toEqual(before.aliased);
    }
    expect(await documentCount(es!, index)).toBe(ELIGIBLE);

    const rerun = await indexGoods(server);
    expect(rerun.status).toBe(200);
    expect(rerun.body).toMatchObject({ success: true, mode: "full", fetched_count: ELIGIBLE, indexed_count: ELIGIBLE });
    expect(rerun.body.failed_count ?? 0).toBe(0);
    expect(await documentCount(es!, index)).toBe(ELIGIBLE);
    // One node left: the replica has nowhere to go, so yellow, not red.
    const health = await es!.cluster.health({ index, wait_for_status: "yellow", timeout: "60s" });
    expect(health).toMatchObject({ status: "yellow", number_of_nodes: 1, unassigned_primary_shards: 0 });
  }, 300_000);
});

import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import { createKnex, migrateToLatest } from "../../src/db/knex.js";
import { generateSources } from "../../src/indexing/batch/source-generator.js";
import { buildService, spawnService } from "../../test/support/spawn-service.js";
import { admin, databaseUrl, printTable } from "../shared/support.js";

// npm run bench:batch [-- --goods N] [--rounds N]
//
// Full-load product batches of N generated source goods (default 1,000,000) through the real
// service process (POST /api/search/v1/batch/product), timed step by step: the load (truncate and
// insert), steps 1a-1d, and the indexing that follows (everything after the load: the cursor
// indexing of every loaded row and the batch log). The step times come from the service's own
// "product batch load done" log line. Each round runs the batch with the live follower on
// (INDEX_LIVE=true, the default) and off, on the same database (on first in odd rounds, off first
// in even ones), and the summary compares the medians (SPEC.md: with live on at most 15% longer). Uses DATABASE_URL's server (a scratch
// database, dropped at the end) and ELASTICSEARCH_URL.

const elasticsearchUrl = process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9200";

interface BatchResponse {
  loaded_count: number;
  indexed_count: number;
  elapsed_ms: number;
  status: string;
  detail?: string;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { goods: { type: "string", default: "1000000" }, rounds: { type: "string", default: "2" } } });
  const goods = Number(values.goods);
  if (!Number.isInteger(goods) || goods < 1) throw new Error("--goods must be a whole number >= 1");
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error("--rounds must be a whole number >= 1");

  const dbName = `bench_${randomBytes(4).toString("hex")}`;
  const suffix = randomBytes(4).toString("hex");
  const [goodsIndex, logIndex] = [`bench_goods_${suffix}`, `bench_batch_log_${suffix}`];
  await admin(`create database ${dbName}`);
  const dbUrl = databaseUrl(dbName);
  const knex = createKnex(dbUrl, { poolMax: 2 });
  const client = new Client({ node: elasticsearchUrl });
  try {
    await migrateToLatest(knex);
    log(`generating ${goods} source goods`);
    const generated = performance.now();
    await generateSources(knex, { goods });
    await knex.raw("vacuum analyze");
    log(`generated in ${Math.round(performance.now() - generated)} ms`);

    buildService();
    const elapsed: Record<"on" | "off", number[]> = { on: [], off: [] };
    for (let round = 1; round <= rounds; round++) {
      // The order alternates, round by round: what a batch pays for the one before it (cold
      // caches, autovacuum of the rows it flipped) falls on either side equally.
      for (const live of round % 2 === 1 ? (["on", "off"] as const) : (["off", "on"] as const)) {
        log(`round ${round}: the full-load batch with live ${live}`);
        const batch = await runBatch({ DATABASE_URL: dbUrl, ELASTICSEARCH_URL: elasticsearchUrl, GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex, INDEX_LIVE: String(live === "on") });
        console.log(`\nround ${round}, live ${live}:`);
        report(goods, batch.response, batch.stepMs);
        elapsed[live].push(batch.response.elapsed_ms);
      }
    }
    const [on, off] = [median(elapsed.on), median(elapsed.off)];
    const ratio = on / off;
    console.log(`\nwhole batch, median of ${rounds}: live on ${on} ms, live off ${off} ms`);
    console.log(`${ratio <= 1.15 ? "ok  " : "MISS"} live on / live off: ${(ratio * 100).toFixed(1)}% (target <= 115%)`);
  } finally {
    await client.indices.delete({ index: `${goodsIndex}*,${logIndex}*`, expand_wildcards: "all", ignore_unavailable: true }).catch(() => {});
    await client.close();
    await knex.destroy();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
}

/** One full-load batch through a service process started with `env`; stopped afterwards. */
async function runBatch(env: Record<string, string>): Promise<{ response: BatchResponse; stepMs: Record<string, number> }> {
  const service = await spawnService(env, { fromBuild: true });
  try {
    const response = await fetch(`${service.url}/api/search/v1/batch/product`, { method: "POST", signal: AbortSignal.timeout(30 * 60_000) });
    const batch = (await response.json()) as BatchResponse;
    if (!response.ok || batch.status !== "COMPLETED") throw new Error(`batch: HTTP ${response.status} ${batch.detail ?? batch.status}`);
    const loadLine = service.logs.find((line) => line.msg === "product batch load done");
    if (!loadLine) throw new Error("the service logged no 'product batch load done' line");
    return { response: batch, stepMs: loadLine.step_ms as Record<string, number> };
  } finally {
    await service.stop("SIGTERM");
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[middle] as number) : Math.round(((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2);
}

function report(goods: number, batch: BatchResponse, stepMs: Record<string, number>): void {
  const loadMs = Object.values(stepMs).reduce((sum, ms) => sum + ms, 0);
  const indexMs = batch.elapsed_ms - loadMs;
  const rate = (rows: number, ms: number) => String(Math.round((rows / Math.max(ms, 1)) * 1000));
  const rows = [["step", "ms", "rows/s"]];
  for (const [step, ms] of Object.entries(stepMs)) rows.push([step, String(ms), step === "1-truncate" ? "" : rate(batch.loaded_count, ms)]);
  rows.push(["load steps together", String(loadMs), rate(batch.loaded_count, loadMs)]);
  rows.push(["2 indexing and 3 log", String(indexMs), rate(batch.indexed_count, indexMs)]);
  rows.push(["whole batch", String(batch.elapsed_ms), rate(batch.loaded_count, batch.elapsed_ms)]);
  console.log(`full-load batch of ${goods} source goods: ${batch.loaded_count} loaded, ${batch.indexed_count} indexed`);
  printTable(rows);
  const loadRate = (batch.loaded_count / Math.max(loadMs, 1)) * 1000;
  console.log(`${loadRate >= 100_000 ? "ok  " : "MISS"} load steps together: ${Math.round(loadRate)} rows/s (target >= 100000)`);
}

function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:batch failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});

import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import { createKnex, migrateToLatest } from "../src/db/knex.js";
import { generateSources } from "../src/indexing/batch/source-generator.js";
import { buildService, spawnService } from "../test/support/spawn-service.js";
import { admin, databaseUrl, printTable } from "./support.js";

// npm run bench:batch [-- --goods N]
//
// One full-load product batch of N generated source goods (default 1,000,000) through the real
// service process (POST /api/search/v1/batch/product), timed step by step: the load (truncate and
// insert), steps 1a-1d, and the indexing that follows (everything after the load: the cursor
// indexing of every loaded row and the batch log). The step times come from the service's own
// "product batch load done" log line. Uses DATABASE_URL's server (a scratch database, dropped at
// the end) and ELASTICSEARCH_URL.

const elasticsearchUrl = process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9200";

interface BatchResponse {
  loaded_count: number;
  indexed_count: number;
  elapsed_ms: number;
  status: string;
  detail?: string;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { goods: { type: "string", default: "1000000" } } });
  const goods = Number(values.goods);
  if (!Number.isInteger(goods) || goods < 1) throw new Error("--goods must be a whole number >= 1");

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
    const service = await spawnService({ DATABASE_URL: dbUrl, ELASTICSEARCH_URL: elasticsearchUrl, GOODS_INDEX: goodsIndex, BATCH_LOG_INDEX: logIndex }, { fromBuild: true });
    try {
      log("running the full-load batch");
      const response = await fetch(`${service.url}/api/search/v1/batch/product`, { method: "POST", signal: AbortSignal.timeout(30 * 60_000) });
      const batch = (await response.json()) as BatchResponse;
      if (!response.ok || batch.status !== "COMPLETED") throw new Error(`batch: HTTP ${response.status} ${batch.detail ?? batch.status}`);
      const loadLine = service.logs.find((line) => line.msg === "product batch load done");
      if (!loadLine) throw new Error("the service logged no 'product batch load done' line");
      report(goods, batch, loadLine.step_ms as Record<string, number>);
    } finally {
      await service.stop("SIGTERM");
    }
  } finally {
    await client.indices.delete({ index: `${goodsIndex}*,${logIndex}*`, expand_wildcards: "all", ignore_unavailable: true }).catch(() => {});
    await client.close();
    await knex.destroy();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
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

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import pino from "pino";
import { createKnex, migrateToLatest } from "../src/db/knex.js";
import { sendBulks, type BulkItem } from "../src/indexing/pipeline/bulk-sender.js";
import { generateGoods } from "../src/indexing/goods-generator.js";
import { goodsMapping } from "../src/indexing/goods-index.js";
import { goodsItem, goodsQuery, type GoodsKey, type GoodsRow } from "../src/indexing/goods-rows.js";
import { runGoodsIndexing } from "../src/indexing/modes.js";
import { readRows } from "../src/indexing/pipeline/row-reader.js";
import { admin, databaseUrl } from "./support.js";

// npm run bench:index [-- --rows N]
//
// Full-mode indexing of N generated goods rows (default 1,000,000), next to two ceilings measured
// in the same run on the same data: PostgreSQL alone (stream every row through the same cursor,
// send nowhere) and Elasticsearch alone (bulk documents built in memory beforehand, same bulk
// size and bulks in flight). Each measurement runs in a child process of its own so that its peak
// RSS is its own; full mode also runs at 100,000 rows to show that memory does not grow with rows.
// Uses DATABASE_URL's server (a scratch database is created and dropped) and ELASTICSEARCH_URL.
//
// --heap-mb M (default 256, 0 for Node's default) caps the old generation of the PostgreSQL and
// full-mode children (--max-old-space-size), as a deployment with a memory budget would. The live
// set of the pipeline is small and flat; without a cap V8 simply collects late on a large machine,
// and peak RSS then says more about the garbage collector than about the pipeline.

const SIZES = { fetchSize: 50_000, bulkSize: 3_000, bulkMaxBytes: 10 * 1024 * 1024, bulksInFlight: 2 };
const SMALL_ROWS = 100_000;

interface Measurement {
  kind: string;
  rows: number;
  docsPerS: number;
  peakRssMb: number;
}

let heapMb = 256;
const elasticsearchUrl = process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9200";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { rows: { type: "string", default: "1000000" }, "heap-mb": { type: "string", default: "256" }, child: { type: "string" }, db: { type: "string" } },
  });
  const rows = Number(values.rows);
  heapMb = Number(values["heap-mb"]);
  if (!Number.isInteger(rows) || rows < 1) throw new Error("--rows must be a whole number >= 1");
  if (!Number.isInteger(heapMb) || heapMb < 0) throw new Error("--heap-mb must be a whole number >= 0");
  if (values.child) {
    const measurement = await measure(values.child, values.db as string, rows);
    process.stdout.write(`${JSON.stringify(measurement)}\n`);
    return;
  }
  await orchestrate(rows);
}

async function orchestrate(rows: number): Promise<void> {
  const dbName = `bench_${randomBytes(4).toString("hex")}`;
  await admin(`create database ${dbName}`);
  const dbUrl = databaseUrl(dbName);
  const knex = createKnex(dbUrl, { poolMax: 2 });
  try {
    await migrateToLatest(knex);
    const small = Math.min(SMALL_ROWS, rows);
    log(`generating ${small} rows`);
    await generateGoods(knex, { rows: small, unusedEvery: 0 });
    const fullSmall = child("full", dbUrl, small);
    const fullSmallUncapped = child("full", dbUrl, small, 0);
    if (rows > small) {
      log(`generating ${rows - small} more rows`);
      await generateGoods(knex, { rows: rows - small, firstNo: small + 1, unusedEvery: 0 });
    }
    await knex.raw(`vacuum analyze "PR_GOODS_SEARCH_INTF"`);
    const postgres = child("postgres", dbUrl, rows);
    const elasticsearch = child("elasticsearch", dbUrl, rows);
    const full = child("full", dbUrl, rows);
    const fullUncapped = child("full", dbUrl, rows, 0);
    report(rows, { fullSmall, postgres, elasticsearch, full, fullSmallUncapped, fullUncapped });
  } finally {
    await knex.destroy();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
}

type Run = "fullSmall" | "postgres" | "elasticsearch" | "full" | "fullSmallUncapped" | "fullUncapped";

function report(rows: number, m: Record<Run, Measurement>): void {
  const ceiling = Math.min(m.postgres.docsPerS, m.elasticsearch.docsPerS);
  const lines = [
    `rows: ${rows}, bulk size ${SIZES.bulkSize}, fetch size ${SIZES.fetchSize}, bulks in flight ${SIZES.bulksInFlight}, heap cap ${heapMb > 0 ? `${heapMb} MB` : "none"}`,
    `full mode:          ${m.full.docsPerS} docs/s, peak RSS ${m.full.peakRssMb} MB`,
    `PostgreSQL alone:   ${m.postgres.docsPerS} rows/s (full mode at ${pct(m.full.docsPerS / m.postgres.docsPerS)})`,
    `Elasticsearch alone: ${m.elasticsearch.docsPerS} docs/s (full mode at ${pct(m.full.docsPerS / m.elasticsearch.docsPerS)})`,
    `full mode / lower ceiling: ${pct(m.full.docsPerS / ceiling)} (target >= 80%)`,
    `peak RSS: ${m.fullSmall.peakRssMb} MB at ${m.fullSmall.rows} rows, ${m.full.peakRssMb} MB at ${m.full.rows} rows ` +
      `(${pct(m.full.peakRssMb / m.fullSmall.peakRssMb - 1, true)}; target within 25% and under 300 MB)`,
    `without a heap cap: ${m.fullSmallUncapped.peakRssMb} MB at ${m.fullSmallUncapped.rows} rows, ${m.fullUncapped.peakRssMb} MB at ` +
      `${m.fullUncapped.rows} rows (${pct(m.fullUncapped.peakRssMb / m.fullSmallUncapped.peakRssMb - 1, true)}), ${m.fullUncapped.docsPerS} docs/s`,
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}

function child(kind: string, dbUrl: string, rows: number, heapCapMb = heapMb): Measurement {
  log(`measuring ${kind} at ${rows} rows${heapCapMb > 0 ? "" : " without a heap cap"}`);
  // The Elasticsearch ceiling keeps every document in memory by design; give it room.
  const heap = kind === "elasticsearch" ? 8192 : heapCapMb;
  const node = heap > 0 ? [`--max-old-space-size=${heap}`] : [];
  const out = execFileSync(process.execPath, [...node, "--import", "tsx", import.meta.filename, "--child", kind, "--db", dbUrl, "--rows", String(rows)], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
    maxBuffer: 1024 * 1024,
  });
  const measurement = JSON.parse(out.trim().split("\n").pop() as string) as Measurement;
  log(`${kind}: ${measurement.docsPerS}/s, peak RSS ${measurement.peakRssMb} MB`);
  return measurement;
}

async function measure(kind: string, dbUrl: string, rows: number): Promise<Measurement> {
  const knex = createKnex(dbUrl, { poolMax: 4 });
  const client = new Client({ node: elasticsearchUrl, requestTimeout: 120_000 });
  const index = `bench_${kind}_${randomBytes(4).toString("hex")}`;
  try {
    const { count, ms } = await (kind === "postgres" ? streamOnly(knex) : kind === "elasticsearch" ? bulkOnly(knex, client, index) : fullMode(knex, client, index));
    if (count !== rows) throw new Error(`${kind}: expected ${rows} rows, got ${count}`);
    return { kind, rows, docsPerS: Math.round((count / ms) * 1000), peakRssMb: Math.round(process.resourceUsage().maxRSS / 1024) };
  } finally {
    await client.indices.delete({ index, ignore_unavailable: true }).catch(() => {});
    await client.close();
    await knex.destroy();
  }
}

async function streamOnly(knex: ReturnType<typeof createKnex>) {
  const started = performance.now();
  let count = 0;
  for await (const row of readRows<GoodsRow>({ knex, query: goodsQuery("full"), fetchSize: SIZES.fetchSize })) {
    if (row.GOODS_NO) count++;
  }
  return { count, ms: performance.now() - started };
}

async function bulkOnly(knex: ReturnType<typeof createKnex>, client: Client, index: string) {
  const items: BulkItem<GoodsKey>[] = [];
  for await (const row of readRows<GoodsRow>({ knex, query: goodsQuery("full"), fetchSize: SIZES.fetchSize })) items.push(goodsItem(row));
  await client.indices.create({ index, mappings: goodsMapping(), settings: { refresh_interval: "-1", number_of_replicas: 0 } });
  async function* fromMemory() {
    yield* items;
  }
  const started = performance.now();
  const stats = await sendBulks(fromMemory(), { client, index, bulkSize: SIZES.bulkSize, maxBytes: SIZES.bulkMaxBytes, concurrency: SIZES.bulksInFlight });
  return { count: stats.successful, ms: performance.now() - started };
}

async function fullMode(knex: ReturnType<typeof createKnex>, client: Client, index: string) {
  const logger = pino({ level: process.env.LOG_LEVEL ?? "info" }, pino.destination(2));
  const result = await runGoodsIndexing({ knex, elasticsearch: client, logger, mode: "full", index, ...SIZES });
  return { count: result.indexedCount, ms: result.elapsedMs };
}

function pct(ratio: number, signed = false): string {
  const value = `${(ratio * 100).toFixed(1)}%`;
  return signed && ratio >= 0 ? `+${value}` : value;
}

function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:index failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});

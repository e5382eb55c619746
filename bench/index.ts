import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import pg from "pg";
import QueryStream from "pg-query-stream";
import { createKnex, migrateToLatest } from "../src/db/knex.js";
import { generateGoods } from "../src/indexing/goods/goods-generator.js";
import { goodsMapping, OPTIMIZED } from "../src/indexing/goods/goods-index.js";
import { goodsQuery, type GoodsRow } from "../src/indexing/goods/goods-rows.js";
import { BULK_RESULT_FIELDS } from "../src/indexing/pipeline/bulk-sender.js";
import { buildService, spawnService } from "../test/support/spawn-service.js";
import { admin, databaseUrl, printTable } from "./support.js";

// npm run bench:index [-- --rows N] [--heap-mb M]
//
// The service's indexing next to what the components really accept, all in one run, on the same
// rows (N generated goods, default 1,000,000, every tenth one not for sale) and the same node:
//
//   full            the service process as npm start runs it (the build in dist/),
//                   GET /api/search/v1/index/db/goods (end to end)
//   cursor          the service process, ?interval=1 with every row 'N' (finalize included)
//   postgres        PostgreSQL alone: the same cursor and fetch size, rows counted, sent nowhere
//   es x2, es x4    Elasticsearch alone: NDJSON bodies of BULK_SIZE documents serialised before
//                   the clock starts, 2 or 4 requests in flight, answers trimmed to what the
//                   service reads (the same filter_path); the better one is the ceiling
//   helpers         what a user would write: pg-query-stream into client.helpers.bulk, defaults
//   helpers+flip    that, then the seed's finalize: one UPDATE flipping every 'N' row
//
// Every Elasticsearch run writes a new index with the goods mapping and the bulk settings full
// mode uses. Each run is a process of its own, so its peak RSS is its own (the service's is read
// from /proc when its run is over); full mode also runs at 100,000 rows to show that memory does
// not grow with the table. Uses DATABASE_URL's server (a scratch database, dropped at the end) and
// ELASTICSEARCH_URL. --heap-mb M (default 256, 0 for Node's default) gives the service process the
// memory budget a deployment would (--max-old-space-size).

const FETCH_SIZE = 50_000;
const BULK_SIZE = 3_000;
const SMALL_ROWS = 100_000;
/** The shipped default; every Elasticsearch run uses it, so they all do the same analysis work. */
const ANALYZER = "cjk";
const elasticsearchUrl = process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9200";

interface Measurement {
  name: string;
  rows: number;
  docsPerS: number;
  peakRssMb: number;
}

type ChildKind = "postgres" | "es" | "helpers" | "helpers-flip";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rows: { type: "string", default: "1000000" },
      "heap-mb": { type: "string", default: "256" },
      child: { type: "string" },
      db: { type: "string" },
      expect: { type: "string" },
      "in-flight": { type: "string", default: "2" },
    },
  });
  if (values.child) {
    const measurement = await measureChild(values.child as ChildKind, values.db!, Number(values.expect), Number(values["in-flight"]));
    process.stdout.write(`${JSON.stringify(measurement)}\n`);
    return;
  }
  const rows = Number(values.rows);
  const heapMb = Number(values["heap-mb"]);
  if (!Number.isInteger(rows) || rows < 1) throw new Error("--rows must be a whole number >= 1");
  if (!Number.isInteger(heapMb) || heapMb < 0) throw new Error("--heap-mb must be a whole number >= 0");
  await orchestrate(rows, heapMb);
}

async function orchestrate(rows: number, heapMb: number): Promise<void> {
  // The service runs as `npm start` runs it: compiled, without the TypeScript loader in its memory.
  buildService();
  const dbName = `bench_${randomBytes(4).toString("hex")}`;
  await admin(`create database ${dbName}`);
  const dbUrl = databaseUrl(dbName);
  const knex = createKnex(dbUrl, { poolMax: 2 });
  const service = (name: string, query: string) => serviceRun(name, dbUrl, query, heapMb);
  try {
    await migrateToLatest(knex);
    const small = Math.min(SMALL_ROWS, rows);
    log(`generating ${small} rows`);
    await generateGoods(knex, { rows: small });
    await knex.raw(`vacuum analyze "PR_GOODS_SEARCH_INTF"`);
    const fullSmall = await service("full", "");
    if (rows > small) {
      log(`generating ${rows - small} more rows`);
      await generateGoods(knex, { rows: rows - small, firstNo: small + 1 });
    }
    const resetAll = async () => {
      await knex.raw(`update "PR_GOODS_SEARCH_INTF" set "INDEX_YN" = 'N'`);
      await knex.raw(`vacuum analyze "PR_GOODS_SEARCH_INTF"`);
    };
    await resetAll();
    const [{ eligible }] = (await knex.raw(`select count(*)::int as eligible from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`)).rows;
    const child = (kind: ChildKind, inFlight = 2) => childRun(kind, dbUrl, eligible, inFlight);

    const m = {
      postgres: child("postgres"),
      es2: child("es", 2),
      es4: child("es", 4),
      helpers: child("helpers"),
      full: await service("full", ""),
      helpersFlip: (await resetAll(), child("helpers-flip")),
      cursor: (await resetAll(), await service("cursor", "?interval=1")),
    };
    report(rows, eligible, heapMb, { ...m, fullSmall });
  } finally {
    await knex.destroy();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
}

function report(rows: number, eligible: number, heapMb: number, m: Record<string, Measurement>): void {
  const ceiling = m.es2!.docsPerS >= m.es4!.docsPerS ? m.es2! : m.es4!;
  const table = [["run", "rows", "docs/s", "peak RSS MB"]];
  for (const key of ["full", "cursor", "postgres", "es2", "es4", "helpers", "helpersFlip", "fullSmall"]) {
    const x = m[key]!;
    table.push([x.name, String(x.rows), String(x.docsPerS), String(x.peakRssMb)]);
  }
  console.log(`${rows} rows (${eligible} for sale), fetch size ${FETCH_SIZE}, bulk size ${BULK_SIZE}, service heap cap ${heapMb > 0 ? `${heapMb} MB` : "none"}`);
  printTable(table);
  const rss = m.full!.peakRssMb;
  const growth = rss / m.fullSmall!.peakRssMb - 1;
  const lines = [
    ratio(`full / Elasticsearch alone (${ceiling.name})`, m.full!.docsPerS / ceiling.docsPerS, 0.8),
    ratio("full / helpers.bulk", m.full!.docsPerS / m.helpers!.docsPerS, 1.1),
    ratio("cursor / full", m.cursor!.docsPerS / m.full!.docsPerS, 0.8),
    ratio("cursor / helpers.bulk + flip", m.cursor!.docsPerS / m.helpersFlip!.docsPerS, 1.2),
    `${verdict(rss <= 250 && Math.abs(growth) <= 0.1)} peak RSS of full mode: ${rss} MB at ${m.full!.rows} rows, ` +
      `${m.fullSmall!.peakRssMb} MB at ${m.fullSmall!.rows} rows (${signedPct(growth)}; target <= 250 MB and within 10%)`,
    `   PostgreSQL alone reads ${(m.postgres!.docsPerS / ceiling.docsPerS).toFixed(1)}x what Elasticsearch alone accepts`,
  ];
  console.log(lines.join("\n"));
}

function ratio(label: string, value: number, target: number): string {
  return `${verdict(value >= target)} ${label}: ${pct(value)} (target >= ${pct(target)})`;
}

function verdict(ok: boolean): string {
  return ok ? "ok  " : "MISS";
}

/** One run of the real service process: a REST call, docs/s from its own report, peak RSS from /proc. */
async function serviceRun(name: string, dbUrl: string, query: string, heapMb: number): Promise<Measurement> {
  const index = `bench_${name}_${randomBytes(4).toString("hex")}`;
  log(`measuring ${name} (service process, GOODS_INDEX=${index})`);
  const service = await spawnService(
    {
      DATABASE_URL: dbUrl,
      ELASTICSEARCH_URL: elasticsearchUrl,
      GOODS_INDEX: index,
      GOODS_ANALYZER: ANALYZER,
      // The indexing path alone: the live follower would index the freshly generated rows beside
      // the run (bench:live measures it).
      INDEX_LIVE: "false",
      NODE_OPTIONS: heapMb > 0 ? `--max-old-space-size=${heapMb}` : "",
    },
    { fromBuild: true },
  );
  const client = new Client({ node: elasticsearchUrl });
  try {
    const response = await fetch(`${service.url}/api/search/v1/index/db/goods${query}`, { signal: AbortSignal.timeout(30 * 60_000) });
    const body = (await response.json()) as { indexed_count?: number; elapsed_ms?: number; detail?: string };
    if (!response.ok) throw new Error(`${name}: HTTP ${response.status} ${body.detail}`);
    const peakRssMb = Math.round(Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${service.child.pid}/status`, "utf8"))![1]) / 1024);
    const measurement = { name, rows: body.indexed_count!, docsPerS: Math.round((body.indexed_count! / body.elapsed_ms!) * 1000), peakRssMb };
    log(`${name}: ${measurement.docsPerS} docs/s, peak RSS ${peakRssMb} MB`);
    return measurement;
  } finally {
    await service.stop("SIGTERM");
    await deleteIndicesLike(client, index);
    await client.close();
  }
}

function childRun(kind: ChildKind, dbUrl: string, expect: number, inFlight: number): Measurement {
  log(`measuring ${kind}${kind === "es" ? ` x${inFlight}` : ""}`);
  const out = execFileSync(
    process.execPath,
    ["--import", "tsx", import.meta.filename, "--child", kind, "--db", dbUrl, "--expect", String(expect), "--in-flight", String(inFlight)],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1024 * 1024 },
  );
  const measurement = JSON.parse(out.trim().split("\n").pop()!) as Measurement;
  log(`${measurement.name}: ${measurement.docsPerS}/s, peak RSS ${measurement.peakRssMb} MB`);
  return measurement;
}

async function measureChild(kind: ChildKind, dbUrl: string, expect: number, inFlight: number): Promise<Measurement> {
  const client = new Client({ node: elasticsearchUrl, requestTimeout: 300_000 });
  const index = `bench_${kind}_${randomBytes(4).toString("hex")}`;
  try {
    if (kind !== "postgres") await client.indices.create({ index, mappings: goodsMapping(ANALYZER), settings: { index: OPTIMIZED } });
    const run =
      kind === "postgres" ? readOnly(dbUrl) : kind === "es" ? bulkOnly(dbUrl, client, index, inFlight) : helpersBulk(dbUrl, client, index, kind === "helpers-flip");
    const { count, ms } = await run;
    if (count !== expect) throw new Error(`${kind}: expected ${expect} rows, got ${count}`);
    const name = kind === "es" ? `es x${inFlight}` : kind === "helpers-flip" ? "helpers+flip" : kind;
    return { name, rows: count, docsPerS: Math.round((count / ms) * 1000), peakRssMb: Math.round(process.resourceUsage().maxRSS / 1024) };
  } finally {
    await client.indices.delete({ index, ignore_unavailable: true }).catch(() => {});
    await client.close();
  }
}

/** The service's full-mode selection through one server-side cursor, as a plain pg user reads it. */
async function* streamRows(dbUrl: string): AsyncGenerator<GoodsRow> {
  const db = new pg.Client({ connectionString: dbUrl });
  await db.connect();
  try {
    const { sql, bindings } = goodsQuery("full");
    yield* db.query(new QueryStream(sql, [...(bindings ?? [])], { batchSize: FETCH_SIZE })) as AsyncIterable<GoodsRow>;
  } finally {
    await db.end();
  }
}

/** The row's version, kept where JSON.stringify does not look (a symbol key). */
const VERSION = Symbol("version");
type VersionedRow = GoodsRow & { [VERSION]: number };

/** The rows as helpers.bulk sends them: the version goes in the action line, not the document. */
async function* withoutVersion(rows: AsyncIterable<GoodsRow>): AsyncGenerator<GoodsRow> {
  for await (const row of rows) {
    const versioned = row as VersionedRow;
    versioned[VERSION] = Number(row.INDEX_VERSION);
    row.INDEX_VERSION = undefined;
    yield versioned;
  }
}

async function readOnly(dbUrl: string) {
  const started = performance.now();
  let count = 0;
  for await (const row of streamRows(dbUrl)) if (row.GOODS_NO) count++;
  return { count, ms: performance.now() - started };
}

async function bulkOnly(dbUrl: string, client: Client, index: string, inFlight: number) {
  const bodies: Buffer[] = [];
  let lines: string[] = [];
  for await (const row of streamRows(dbUrl)) {
    // What the service writes: the row's version in the action line, the rest as the document.
    const { INDEX_VERSION: version, ...document } = row;
    lines.push(`{"index":{"_id":${JSON.stringify(row.GOODS_NO)},"version":${version},"version_type":"external"}}`, JSON.stringify(document));
    if (lines.length === 2 * BULK_SIZE) bodies.push(Buffer.from(`${lines.join("\n")}\n`)), (lines = []);
  }
  if (lines.length > 0) bodies.push(Buffer.from(`${lines.join("\n")}\n`));
  const started = performance.now();
  let count = 0;
  let next = 0;
  const sender = async () => {
    while (next < bodies.length) {
      const body = bodies[next++]!;
      const result = (await client.transport.request({ method: "POST", path: `/${index}/_bulk`, bulkBody: body, querystring: { filter_path: BULK_RESULT_FIELDS.join(",") } })) as {
        errors: boolean;
        items: unknown[];
      };
      if (result.errors) throw new Error("Elasticsearch rejected documents");
      count += result.items.length;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, sender));
  return { count, ms: performance.now() - started };
}

async function helpersBulk(dbUrl: string, client: Client, index: string, flip: boolean) {
  const started = performance.now();
  const stats = await client.helpers.bulk<GoodsRow>({
    datasource: withoutVersion(streamRows(dbUrl)),
    onDocument: (row) => ({ index: { _index: index, _id: row.GOODS_NO, version: (row as VersionedRow)[VERSION], version_type: "external" } }),
  });
  if (flip) {
    const db = new pg.Client({ connectionString: dbUrl });
    await db.connect();
    await db.query(`update "PR_GOODS_SEARCH_INTF" set "INDEX_YN" = 'Y' where "INDEX_YN" = 'N'`);
    await db.end();
  }
  return { count: stats.successful, ms: performance.now() - started };
}

/** The service's index for a run is an alias over physical indices named after it. */
async function deleteIndicesLike(client: Client, index: string): Promise<void> {
  await client.indices.delete({ index: `${index}*`, expand_wildcards: "all", ignore_unavailable: true }).catch(() => {});
}

function pct(ratio: number): string {
  return `${(ratio * 100).toFixed(1)}%`;
}

function signedPct(ratio: number): string {
  return `${ratio >= 0 ? "+" : ""}${pct(ratio)}`;
}

function log(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:index failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});

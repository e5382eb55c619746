import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import pg from "pg";
import QueryStream from "pg-query-stream";
import { createKnex, migrateToLatest } from "../../src/db/knex.js";
import { generateGoods } from "../../src/indexing/goods/goods-generator.js";
import { goodsMapping, OPTIMIZED, restoreBuildIndex } from "../../src/indexing/goods/goods-index.js";
import { DOCUMENT_FIELDS, goodsQuery } from "../../src/indexing/goods/goods-rows.js";
import { BULK_RESULT_FIELDS } from "../../src/indexing/pipeline/bulk-sender.js";
import { buildService, spawnService } from "../../test/support/spawn-service.js";
import { admin, databaseUrl, printTable, startCpuMeter, wholeNumber, type CpuUse } from "../shared/support.js";

// npm run bench:index [-- --rows N] [--heap-mb M] [--fetch-size F]
//
// The service's indexing next to what the components really accept, all in one run, on the same
// rows (N generated goods, default 1,000,000, every tenth one not for sale) and the same node:
//
//   full            the service process as npm start runs it (the build in dist/),
//                   GET /api/search/v1/index/db/goods (end to end)
//   cursor          the service process, ?interval=1 with every row 'N' (finalize included)
//   postgres        PostgreSQL alone: the same query, cursor and fetch size, rows counted, sent nowhere
//   es x2, es x4    Elasticsearch alone: the bulk lines the service sends (its query's), joined
//                   into bodies of BULK_SIZE documents before the clock starts, 2 or 4 requests in
//                   flight, answers trimmed to what the service reads (the same filter_path); the
//                   better one is the ceiling
//   helpers         what a user would write: pg-query-stream into client.helpers.bulk, defaults
//   helpers+flip    that, then the seed's finalize: one UPDATE flipping every 'N' row
//
// Every Elasticsearch run writes a new index with the goods mapping and the bulk settings full
// mode uses, and ends as a full run ends before its alias moves: live settings back and one
// refresh (restoreBuildIndex), so that every run does the same work, searchable documents. (A
// ceiling without it leaves out the refresh, which writes the segments of everything indexed
// since the last one: 1.5 to 1.7 s of a 6 s full run at 270,000 documents.)
//
// Each run is a process of its own, so its peak RSS is its own (the service's is read from /proc
// when its run is over); full mode also runs at 100,000 rows to show that memory does not grow
// with the table. Uses DATABASE_URL's server (a scratch database, dropped at the end) and
// ELASTICSEARCH_URL. The service runs on Node's default heap, as `npm start` runs it; --heap-mb M
// caps it (--max-old-space-size) as a deployment with a memory budget might (a cap of 256 to
// 1,024 MB was measured to cost about 2 us of service CPU per document: V8 then marks the old
// generation some twenty times per 270,000 documents instead of twice). --fetch-size F (default
// 3,000, the service's INDEX_FETCH_SIZE default; 50,000 was the seed's) is the rows per round trip
// of every run's cursor.
//
// Each run's CPU is read from /proc around its timed part: the process that sends (the service,
// or the baseline's own process), every PostgreSQL server process, and Elasticsearch's JVM,
// printed in microseconds per document.

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
  /** CPU per document, microseconds: the sending process, PostgreSQL, Elasticsearch. */
  cpuUs: { client: number; postgres: number; elasticsearch: number };
}

/** A timed part: documents, milliseconds and the CPU it used. */
interface Timed {
  count: number;
  ms: number;
  cpu: CpuUse;
}

type ChildKind = "postgres" | "es" | "helpers" | "helpers-flip";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rows: { type: "string", default: "1000000" },
      "heap-mb": { type: "string", default: "0" },
      child: { type: "string" },
      db: { type: "string" },
      expect: { type: "string" },
      "in-flight": { type: "string", default: "2" },
      "fetch-size": { type: "string", default: "3000" },
    },
  });
  const fetchSize = wholeNumber(values["fetch-size"], "--fetch-size");
  if (values.child) {
    const measurement = await measureChild(values.child as ChildKind, values.db!, Number(values.expect), Number(values["in-flight"]), fetchSize);
    process.stdout.write(`${JSON.stringify(measurement)}\n`);
    return;
  }
  const rows = wholeNumber(values.rows, "--rows");
  const heapMb = Number(values["heap-mb"]);
  if (!Number.isInteger(heapMb) || heapMb < 0) throw new Error("--heap-mb must be a whole number >= 0");
  await orchestrate(rows, heapMb, fetchSize);
}

async function orchestrate(rows: number, heapMb: number, fetchSize: number): Promise<void> {
  // The service runs as `npm start` runs it: compiled, without the TypeScript loader in its memory.
  buildService();
  const dbName = `bench_${randomBytes(4).toString("hex")}`;
  await admin(`create database ${dbName}`);
  const dbUrl = databaseUrl(dbName);
  const knex = createKnex(dbUrl, { poolMax: 2 });
  const service = (name: string, query: string) => serviceRun(name, dbUrl, query, heapMb, fetchSize);
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
    const child = (kind: ChildKind, inFlight = 2) => childRun(kind, dbUrl, eligible, inFlight, fetchSize);

    const m = {
      postgres: child("postgres"),
      es2: child("es", 2),
      es4: child("es", 4),
      helpers: child("helpers"),
      full: await service("full", ""),
      helpersFlip: (await resetAll(), child("helpers-flip")),
      cursor: (await resetAll(), await service("cursor", "?interval=1")),
    };
    report({ rows, eligible, heapMb, fetchSize }, { ...m, fullSmall });
  } finally {
    await knex.destroy();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
}

function report(run: { rows: number; eligible: number; heapMb: number; fetchSize: number }, m: Record<string, Measurement>): void {
  const ceiling = m.es2!.docsPerS >= m.es4!.docsPerS ? m.es2! : m.es4!;
  const table = [["run", "rows", "docs/s", "peak RSS MB", "CPU us/doc: sender", "PostgreSQL", "Elasticsearch", "sender+PostgreSQL"]];
  for (const key of ["full", "cursor", "postgres", "es2", "es4", "helpers", "helpersFlip", "fullSmall"]) {
    const x = m[key]!;
    const { client, postgres, elasticsearch } = x.cpuUs;
    table.push([x.name, String(x.rows), String(x.docsPerS), String(x.peakRssMb), ...[client, postgres, elasticsearch, client + postgres].map((us) => us.toFixed(1))]);
  }
  console.log(
    `${run.rows} rows (${run.eligible} for sale), fetch size ${run.fetchSize}, bulk size ${BULK_SIZE}, service heap cap ${run.heapMb > 0 ? `${run.heapMb} MB` : "none"}`,
  );
  printTable(table);
  const rss = m.full!.peakRssMb;
  const growth = rss / m.fullSmall!.peakRssMb - 1;
  const nonEs = m.full!.cpuUs.client + m.full!.cpuUs.postgres;
  const lines = [
    ratio(`full / Elasticsearch alone (${ceiling.name})`, m.full!.docsPerS / ceiling.docsPerS, 0.8),
    ratio("full / helpers.bulk", m.full!.docsPerS / m.helpers!.docsPerS, 1.1),
    ratio("cursor / full", m.cursor!.docsPerS / m.full!.docsPerS, 0.9),
    ratio("cursor / helpers.bulk + flip", m.cursor!.docsPerS / m.helpersFlip!.docsPerS, 1.2),
    `${verdict(nonEs <= 9)} CPU of full mode outside Elasticsearch: service ${m.full!.cpuUs.client.toFixed(1)} + PostgreSQL ${m.full!.cpuUs.postgres.toFixed(1)} = ` +
      `${nonEs.toFixed(1)} us/doc (target <= 9); Elasticsearch ${m.full!.cpuUs.elasticsearch.toFixed(1)} us/doc, alone ${ceiling.cpuUs.elasticsearch.toFixed(1)}`,
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
async function serviceRun(name: string, dbUrl: string, query: string, heapMb: number, fetchSize: number): Promise<Measurement> {
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
      INDEX_FETCH_SIZE: String(fetchSize),
      NODE_OPTIONS: heapMb > 0 ? `--max-old-space-size=${heapMb}` : "",
    },
    { fromBuild: true },
  );
  const client = new Client({ node: elasticsearchUrl });
  try {
    const cpuMeter = startCpuMeter(service.child.pid!);
    const response = await fetch(`${service.url}/api/search/v1/index/db/goods${query}`, { signal: AbortSignal.timeout(30 * 60_000) });
    const body = (await response.json()) as { indexed_count?: number; elapsed_ms?: number; detail?: string };
    const cpu = cpuMeter();
    if (!response.ok) throw new Error(`${name}: HTTP ${response.status} ${body.detail}`);
    const peakRssMb = Math.round(Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${service.child.pid}/status`, "utf8"))![1]) / 1024);
    const rows = body.indexed_count!;
    const measurement = { name, rows, docsPerS: Math.round((rows / body.elapsed_ms!) * 1000), peakRssMb, cpuUs: cpuPerDocument(cpu, rows) };
    log(`${name}: ${measurement.docsPerS} docs/s, peak RSS ${peakRssMb} MB`);
    return measurement;
  } finally {
    await service.stop("SIGTERM");
    await deleteIndicesLike(client, index);
    await client.close();
  }
}

/** Microseconds of CPU per document: the sending process ("service" of the meter), PostgreSQL, Elasticsearch. */
function cpuPerDocument(cpu: CpuUse, documents: number): Measurement["cpuUs"] {
  const us = (seconds: number) => (seconds * 1e6) / documents;
  return { client: us(cpu.seconds.service), postgres: us(cpu.seconds.postgres), elasticsearch: us(cpu.seconds.elasticsearch) };
}

function childRun(kind: ChildKind, dbUrl: string, expect: number, inFlight: number, fetchSize: number): Measurement {
  log(`measuring ${kind}${kind === "es" ? ` x${inFlight}` : ""}`);
  const out = execFileSync(
    process.execPath,
    ["--import", "tsx", import.meta.filename, "--child", kind, "--db", dbUrl, "--expect", String(expect), "--in-flight", String(inFlight), "--fetch-size", String(fetchSize)],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 1024 * 1024 },
  );
  const measurement = JSON.parse(out.trim().split("\n").pop()!) as Measurement;
  log(`${measurement.name}: ${measurement.docsPerS}/s, peak RSS ${measurement.peakRssMb} MB`);
  return measurement;
}

async function measureChild(kind: ChildKind, dbUrl: string, expect: number, inFlight: number, fetchSize: number): Promise<Measurement> {
  const client = new Client({ node: elasticsearchUrl, requestTimeout: 300_000 });
  const index = `bench_${kind}_${randomBytes(4).toString("hex")}`;
  // Connected before the CPU meter starts and closed after it stops, so that the meter counts this
  // run's PostgreSQL backend (one that starts and ends in between is not seen).
  const db = new pg.Client({ connectionString: dbUrl });
  await db.connect();
  try {
    if (kind !== "postgres") await client.indices.create({ index, mappings: goodsMapping(ANALYZER), settings: { index: OPTIMIZED } });
    const run =
      kind === "postgres"
        ? readOnly(db, fetchSize)
        : kind === "es"
          ? bulkOnly(db, client, index, inFlight, fetchSize)
          : helpersBulk(db, client, index, kind === "helpers-flip", fetchSize);
    const { count, ms, cpu } = await run;
    if (count !== expect) throw new Error(`${kind}: expected ${expect} rows, got ${count}`);
    const name = kind === "es" ? `es x${inFlight}` : kind === "helpers-flip" ? "helpers+flip" : kind;
    return {
      name,
      rows: count,
      docsPerS: Math.round((count / ms) * 1000),
      peakRssMb: Math.round(process.resourceUsage().maxRSS / 1024),
      cpuUs: cpuPerDocument(cpu, count),
    };
  } finally {
    await client.indices.delete({ index, ignore_unavailable: true }).catch(() => {});
    await client.close();
    await db.end();
  }
}

/** Starts the clock and the CPU meter of this process; the returned function stops both. */
function startTimer(): (count: number) => Timed {
  const started = performance.now();
  const cpuMeter = startCpuMeter(process.pid);
  return (count) => ({ count, ms: performance.now() - started, cpu: cpuMeter() });
}

/** A query's rows through one server-side cursor, as a plain pg user reads them. */
function streamRows<Row>(db: pg.Client, sql: string, fetchSize: number, rowMode?: "array"): AsyncIterable<Row> {
  return db.query(new QueryStream(sql, [], { batchSize: fetchSize, rowMode })) as AsyncIterable<Row>;
}

/** The bulk items the service's full mode reads: its own query. */
async function* serviceLines(db: pg.Client, fetchSize: number): AsyncGenerator<string> {
  for await (const [lines] of streamRows<[string]>(db, goodsQuery("full").sql, fetchSize, "array")) yield lines;
}

interface DocumentRow {
  GOODS_NO: string;
  INDEX_VERSION: string | undefined;
}

/** The row's version, kept where JSON.stringify does not look (a symbol key). */
const VERSION = Symbol("version");
type VersionedRow = DocumentRow & { [VERSION]: number };

/**
 * The rows as helpers.bulk sends them: the document's fields (the same definition the service's
 * query uses), the version in the action line, not the document.
 */
async function* documentRows(db: pg.Client, fetchSize: number): AsyncGenerator<DocumentRow> {
  const sql = `select ${DOCUMENT_FIELDS}, g."INDEX_VERSION" from "PR_GOODS_SEARCH_INTF" g where g."USE_YN" = 'Y'`;
  for await (const row of streamRows<DocumentRow>(db, sql, fetchSize)) {
    const versioned = row as VersionedRow;
    versioned[VERSION] = Number(row.INDEX_VERSION);
    row.INDEX_VERSION = undefined;
    yield versioned;
  }
}

async function readOnly(db: pg.Client, fetchSize: number): Promise<Timed> {
  const stop = startTimer();
  let count = 0;
  for await (const lines of serviceLines(db, fetchSize)) if (lines.length > 0) count++;
  return stop(count);
}

async function bulkOnly(db: pg.Client, client: Client, index: string, inFlight: number, fetchSize: number): Promise<Timed> {
  const bodies: Buffer[] = [];
  let items: string[] = [];
  for await (const lines of serviceLines(db, fetchSize)) {
    items.push(lines);
    if (items.length === BULK_SIZE) bodies.push(Buffer.from(items.join(""))), (items = []);
  }
  if (items.length > 0) bodies.push(Buffer.from(items.join("")));
  const stop = startTimer();
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
  await restoreBuildIndex(client, index);
  return stop(count);
}

async function helpersBulk(db: pg.Client, client: Client, index: string, flip: boolean, fetchSize: number): Promise<Timed> {
  const stop = startTimer();
  const stats = await client.helpers.bulk<DocumentRow>({
    datasource: documentRows(db, fetchSize),
    onDocument: (row) => ({ index: { _index: index, _id: row.GOODS_NO, version: (row as VersionedRow)[VERSION], version_type: "external" } }),
  });
  await restoreBuildIndex(client, index);
  if (flip) await db.query(`update "PR_GOODS_SEARCH_INTF" set "INDEX_YN" = 'Y' where "INDEX_YN" = 'N'`);
  return stop(stats.successful);
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

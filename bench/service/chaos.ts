import { randomBytes, randomInt } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import pg from "pg";
import { spawnService, type ServiceProcess } from "../../test/support/spawn-service.js";
import { startTcpProxy, type TcpProxy } from "../../test/support/tcp-proxy.js";
import { deleteGoodsIndices } from "../../test/indexing/helpers.js";
import { admin, createInstances, databaseUrl, printTable, seedGoods, wholeNumber } from "../shared/support.js";

// npm run bench:chaos [-- --rows N --rounds R --fault-s F --calm-s C --clients K --max-s M]
//
// GPU traffic, indexing runs and product changes while the database and Elasticsearch fail and
// come back. The real service runs as a child process on a scratch database of N generated goods
// (default 200,000, every tenth out of use) and reaches Elasticsearch through a loopback TCP proxy
// the bench can cut. After one full index with no fault, for R rounds (default 3): the database
// goes down for F seconds (`allow_connections false` and every backend of the scratch database
// terminated), C calm seconds, Elasticsearch is cut for F seconds (`sever`), C calm seconds.
// Meanwhile K clients (default 8) cycle through the GPU routes and /readyz, indexing runs go back
// to back (full, cursor, full, ...) and a writer changes or delists a few random products every
// 250 ms. Then traffic stops, the rows are checked against the index, a cursor run and a full run
// catch up, and the rows are checked again. Prints each fault's answers and recovery, the
// indexing runs, the rows lost and the verdicts; exits 1 on a MISS or past --max-s (default 300).
// Uses DATABASE_URL's server (admin database for the faults) and ELASTICSEARCH_URL; all traffic
// stays on 127.0.0.1. Definitions: docs/reliability.md, "Chaos".

const elasticsearchUrl = process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9200";
const REQUEST_TIMEOUT_MS = 5_000;
/** Between one client's requests: the bench checks answers, not throughput, and shares two cores. */
const CLIENT_PAUSE_MS = 20;
/** After a failed or refused indexing run, as a scheduler would wait before the next one. */
const INDEX_RETRY_MS = 250;
const CHURN_EVERY_MS = 250;
const RECOVERY_TARGET_MS = 2_000;
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;

const MIX = [
  { route: "offers", method: "GET", path: "/api/gpu/offers?gpu_name=4090&max_price=2" },
  { route: "search-offers", method: "POST", path: "/api/gpu/search-offers", body: JSON.stringify({ min_gpu_ram: 16, max_price: 1.5, sort_by: "price_per_gpu", limit: 50 }) },
  { route: "instances", method: "GET", path: "/api/gpu/instances?limit=50" },
  { route: "statistics", method: "GET", path: "/api/gpu/statistics" },
  { route: "readyz", method: "GET", path: "/readyz" },
];

/** `lost`: no answer at all (connection reset, timeout); `4xx` and `5xx` exclude 503 and are defects. */
type Outcome = "2xx" | "503" | "5xx" | "4xx" | "lost";

interface Answer {
  route: string;
  sent: number;
  answered: number;
  status: number;
  outcome: Outcome;
  /** The start of the body of a defect (4xx, 5xx other than 503), to name it in the report. */
  detail?: string;
}

interface IndexRun {
  mode: "full" | "cursor";
  sent: number;
  answered: number;
  /** 0 when no answer came. */
  status: number;
  code: string;
}

interface Fault {
  kind: "database" | "elasticsearch";
  start: number;
  end: number;
}

interface Traffic {
  answers: Answer[];
  runs: IndexRun[];
  churn: { changed: number; delisted: number; failedTicks: number };
}

/** What the index holds against the rows, as `compare` counts it. */
interface RowCheck {
  eligible: number;
  /** Eligible rows marked INDEX_YN='Y' whose document is missing or older than the row: no cursor run will fix them. */
  flippedWithout: number;
  /** Eligible rows with no document, or one older than the row (pending ones included). */
  missingOrStale: number;
  /** Documents whose product is not eligible (delisted): removals not done. */
  ghosts: number;
  pending: number;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rows: { type: "string", default: "200000" },
      rounds: { type: "string", default: "3" },
      "fault-s": { type: "string", default: "3" },
      "calm-s": { type: "string", default: "5" },
      clients: { type: "string", default: "8" },
      "max-s": { type: "string", default: "300" },
    },
  });
  const rows = wholeNumber(values.rows, "--rows");
  const rounds = wholeNumber(values.rounds, "--rounds");
  const faultMs = wholeNumber(values["fault-s"], "--fault-s") * 1000;
  const calmMs = wholeNumber(values["calm-s"], "--calm-s") * 1000;
  const clients = wholeNumber(values.clients, "--clients");
  const maxS = wholeNumber(values["max-s"], "--max-s");

  const dbName = `bench_${randomBytes(5).toString("hex")}`;
  const index = `bench_chaos_${randomBytes(4).toString("hex")}`;
  const dbUrl = databaseUrl(dbName);
  // The bench's own client reaches Elasticsearch directly, so the checks are not cut with the service.
  const es = new Client({ node: elasticsearchUrl });
  await admin(`create database ${dbName}`);
  let service: ServiceProcess | undefined;
  let proxy: TcpProxy | undefined;
  const writer = new pg.Pool({ connectionString: dbUrl, max: 1 });
  // A connection terminated while idle in the pool is expected during a database fault.
  writer.on("error", () => {});
  try {
    await seedGoods(dbUrl, rows);
    proxy = await startTcpProxy(elasticsearchUrl);
    service = await spawnService({
      DATABASE_URL: dbUrl,
      ELASTICSEARCH_URL: proxy.url,
      GOODS_INDEX: index,
      SIM_CREATING_MS: "200",
      SIM_LOADING_MS: "200",
      SIM_MODEL_SERVER_START_MS: "200",
    });
    await createInstances(service.url);
    const deadline = AbortSignal.timeout(maxS * 1000);
    const url = service.url;

    const first = await indexRun(url, "full", deadline);
    if (first.status !== 200) throw new Error(`the first full index, with no fault, answered ${first.status} ${first.code}`);

    const stop = new AbortController();
    const traffic: Traffic = { answers: [], runs: [], churn: { changed: 0, delisted: 0, failedTicks: 0 } };
    const t0 = performance.now();
    const loops = Promise.all([
      ...Array.from({ length: clients }, (_, i) => gpuClient(url, i, traffic.answers, stop.signal, deadline)),
      indexLoop(url, traffic.runs, stop.signal, deadline),
      churn(writer, rows, traffic.churn, stop.signal, deadline),
    ]);
    const faults: Fault[] = [];
    try {
      await sleep(calmMs, undefined, { signal: deadline });
      for (let round = 0; round < rounds; round++) {
        faults.push(await databaseFault(dbName, faultMs, deadline));
        await sleep(calmMs, undefined, { signal: deadline });
        faults.push(await elasticsearchFault(proxy, faultMs, deadline));
        await sleep(calmMs, undefined, { signal: deadline });
      }
    } finally {
      stop.abort();
    }
    await loops;
    const chaosEnd = performance.now();

    // The index as the chaos left it, then after a cursor run and a full run with no fault.
    const before = await compare(writer, es, index);
    const cursor = await indexRun(url, "cursor", deadline);
    const afterCursor = await compare(writer, es, index);
    const full = await indexRun(url, "full", deadline);
    const afterFull = await compare(writer, es, index);
    const status = await indexStatus(url, deadline);

    const failures = report({ t0, chaosEnd, faults, traffic, clients, rows, before, afterCursor, afterFull, catchUp: [cursor, full], status });
    printErrorLines(service.logs);
    if (failures > 0) process.exitCode = 1;
  } finally {
    await service?.stop("SIGTERM");
    await proxy?.close();
    await writer.end();
    // Whatever happened: the database open again (a fault may have been cut short), then dropped.
    await admin(`alter database ${dbName} allow_connections true`).catch(() => undefined);
    await deleteGoodsIndices(es, index).catch(() => undefined);
    await es.close();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
}

/** One client: the routes in turn, each answer classified and timestamped, until `stop`. */
async function gpuClient(url: string, offset: number, answers: Answer[], stop: AbortSignal, deadline: AbortSignal): Promise<void> {
  for (let i = offset; !stop.aborted; i++) {
    const request = MIX[i % MIX.length]!;
    const sent = performance.now();
    let status = 0;
    let body = "";
    try {
      const res = await fetch(`${url}${request.path}`, {
        method: request.method,
        body: request.body,
        headers: { "content-type": "application/json" },
        signal: AbortSignal.any([AbortSignal.timeout(REQUEST_TIMEOUT_MS), deadline]),
      });
      body = await res.text();
      status = res.status;
    } catch {
      deadline.throwIfAborted();
    }
    const outcome = outcomeOf(status);
    const detail = outcome === "5xx" || outcome === "4xx" ? body.slice(0, 160) : undefined;
    answers.push({ route: request.route, sent, answered: performance.now(), status, outcome, detail });
    await sleep(CLIENT_PAUSE_MS);
  }
}

function outcomeOf(status: number): Outcome {
  if (status === 0) return "lost";
  if (status === 503) return "503";
  if (status >= 500) return "5xx";
  if (status >= 400) return "4xx";
  return "2xx";
}

/** Indexing runs back to back, full and cursor in turn, until `stop`; the run in progress ends first. */
async function indexLoop(url: string, runs: IndexRun[], stop: AbortSignal, deadline: AbortSignal): Promise<void> {
  for (let i = 0; !stop.aborted; i++) {
    const run = await indexRun(url, i % 2 === 0 ? "cursor" : "full", deadline);
    runs.push(run);
    if (run.status !== 200) await sleep(INDEX_RETRY_MS);
  }
}

async function indexRun(url: string, mode: "full" | "cursor", deadline: AbortSignal): Promise<IndexRun> {
  const sent = performance.now();
  try {
    const res = await fetch(`${url}/api/search/v1/index/db/goods${mode === "cursor" ? "?interval=1" : ""}`, { signal: deadline });
    const body = (await res.json()) as { code?: string };
    return { mode, sent, answered: performance.now(), status: res.status, code: body.code ?? "" };
  } catch {
    deadline.throwIfAborted();
    return { mode, sent, answered: performance.now(), status: 0, code: "" };
  }
}

/**
 * Product changes while everything else goes on: each tick changes 20 random products (price,
 * SYS_MOD_DTM, INDEX_YN='N', as the source system would) and delists one. Ticks that meet the
 * database fault fail and are counted; the changes they would have made never happened.
 */
async function churn(writer: pg.Pool, rows: number, counts: Traffic["churn"], stop: AbortSignal, deadline: AbortSignal): Promise<void> {
  const goodsNo = () => `G${String(randomInt(1, rows + 1)).padStart(10, "0")}`;
  while (!stop.aborted) {
    deadline.throwIfAborted();
    try {
      const changed = await writer.query(
        `update "PR_GOODS_SEARCH_INTF" set "SALE_PRICE" = "SALE_PRICE" + 10, "SYS_MOD_DTM" = now(), "INDEX_YN" = 'N' where "GOODS_NO" = any($1)`,
        [Array.from({ length: 20 }, goodsNo)],
      );
      const delisted = await writer.query(
        `update "PR_GOODS_SEARCH_INTF" set "USE_YN" = 'N', "SYS_MOD_DTM" = now(), "INDEX_YN" = 'N' where "GOODS_NO" = $1 and "USE_YN" = 'Y'`,
        [goodsNo()],
      );
      counts.changed += changed.rowCount ?? 0;
      counts.delisted += delisted.rowCount ?? 0;
    } catch {
      counts.failedTicks++;
    }
    await sleep(CHURN_EVERY_MS);
  }
}

/** The scratch database refuses connections and loses every backend for `ms`, then opens again. */
async function databaseFault(dbName: string, ms: number, deadline: AbortSignal): Promise<Fault> {
  const start = performance.now();
  await admin(`alter database ${dbName} allow_connections false`);
  await admin(`select pg_terminate_backend(pid) from pg_stat_activity where datname = '${dbName}'`);
  try {
    await sleep(ms, undefined, { signal: deadline });
  } finally {
    await admin(`alter database ${dbName} allow_connections true`);
  }
  return { kind: "database", start, end: performance.now() };
}

/** Every connection to Elasticsearch cut, and new ones refused, for `ms`. */
async function elasticsearchFault(proxy: TcpProxy, ms: number, deadline: AbortSignal): Promise<Fault> {
  const start = performance.now();
  proxy.sever();
  try {
    await sleep(ms, undefined, { signal: deadline });
  } finally {
    proxy.restore();
  }
  return { kind: "elasticsearch", start, end: performance.now() };
}

/** Every eligible row against the index behind the alias (refreshed), by GOODS_NO and SYS_MOD_DTM. */
async function compare(db: pg.Pool, es: Client, alias: string): Promise<RowCheck> {
  const { rows } = await db.query<{ id: string; flag: string; mod: string }>(
    `select "GOODS_NO" as id, "INDEX_YN" as flag, to_char("SYS_MOD_DTM" at time zone 'UTC', ${ISO}) as mod
       from "PR_GOODS_SEARCH_INTF" where "USE_YN" = 'Y'`,
  );
  await es.indices.refresh({ index: alias });
  const documents = new Map<string, string>();
  for await (const page of es.helpers.scrollSearch<{ SYS_MOD_DTM: string }>({ index: alias, size: 10_000, _source: ["SYS_MOD_DTM"], sort: ["_doc"] })) {
    for (const hit of page.body.hits.hits) documents.set(hit._id!, hit._source!.SYS_MOD_DTM);
  }
  const check: RowCheck = { eligible: rows.length, flippedWithout: 0, missingOrStale: 0, ghosts: 0, pending: 0 };
  for (const row of rows) {
    const current = documents.get(row.id) === row.mod;
    if (row.flag === "N") check.pending++;
    if (!current) check.missingOrStale++;
    if (!current && row.flag === "Y") check.flippedWithout++;
  }
  const eligible = new Set(rows.map((r) => r.id));
  for (const id of documents.keys()) if (!eligible.has(id)) check.ghosts++;
  return check;
}

async function indexStatus(url: string, deadline: AbortSignal): Promise<{ drift: number; pending_rows: number }> {
  const res = await fetch(`${url}/api/search/v1/index/db/goods/status`, { signal: deadline });
  if (res.status !== 200) throw new Error(`the index status answered ${res.status}`);
  return (await res.json()) as { drift: number; pending_rows: number };
}

interface Results {
  t0: number;
  chaosEnd: number;
  faults: Fault[];
  traffic: Traffic;
  clients: number;
  rows: number;
  before: RowCheck;
  afterCursor: RowCheck;
  afterFull: RowCheck;
  catchUp: IndexRun[];
  status: { drift: number; pending_rows: number };
}

/** Prints the tables and the verdicts; returns the number of MISS lines. */
function report(r: Results): number {
  const { answers, runs, churn: changes } = r.traffic;
  const s = (t: number) => ((t - r.t0) / 1000).toFixed(1);
  const count = (list: Answer[], outcome: Outcome) => String(list.filter((a) => a.outcome === outcome).length);

  console.log(`\n${r.rows} goods rows, ${r.clients} clients cycling ${MIX.map((m) => m.route).join(", ")} (timeout ${REQUEST_TIMEOUT_MS / 1000} s)`);
  const recoveries: number[] = [];
  const table = [["fault", "at s", "for s", "2xx", "503", "5xx", "4xx", "lost", "gpu back ms", "readyz back ms"]];
  r.faults.forEach((fault, i) => {
    // A fault's answers: those to requests sent from its start until the next fault's start.
    const until = r.faults[i + 1]?.start ?? r.chaosEnd;
    const window = answers.filter((a) => a.sent >= fault.start && a.sent < until);
    const gpu = firstAfter(answers, fault.end, (a) => a.route !== "readyz" && a.outcome === "2xx");
    const ready = firstAfter(answers, fault.end, (a) => a.route === "readyz" && a.status === 200);
    recoveries.push(gpu, ready);
    table.push([
      fault.kind,
      s(fault.start),
      ((fault.end - fault.start) / 1000).toFixed(1),
      count(window, "2xx"),
      count(window, "503"),
      count(window, "5xx"),
      count(window, "4xx"),
      count(window, "lost"),
      ms(gpu),
      ms(ready),
    ]);
  });
  table.push(["all traffic", "0.0", s(r.chaosEnd), count(answers, "2xx"), count(answers, "503"), count(answers, "5xx"), count(answers, "4xx"), count(answers, "lost"), "", ""]);
  printTable(table);

  console.log(`\nindexing runs during the chaos (back to back; ${INDEX_RETRY_MS} ms pause after a failed one):`);
  const outcomes = new Map<string, number>();
  for (const run of runs) {
    const key = `${run.mode} ${run.status === 0 ? "no answer" : run.status}${run.code ? ` ${run.code}` : ""}`;
    outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
  }
  printTable([["run and answer", "runs"], ...[...outcomes].sort().map(([key, n]) => [key, String(n)])]);
  const badRuns = runs.filter((run) => ![200, 409, 503].includes(run.status));

  console.log(`\nproduct changes meanwhile: ${changes.changed} rows changed, ${changes.delisted} delisted, ${changes.failedTicks} writes failed during faults`);
  printTable([
    ["rows against the index", "eligible", "pending", "Y w/o doc", "missing/stale", "ghosts"],
    ...(
      [
        ["after the chaos", r.before],
        [`after a cursor run (${r.catchUp[0]!.status})`, r.afterCursor],
        [`after a full run (${r.catchUp[1]!.status})`, r.afterFull],
      ] as const
    ).map(([name, c]) => [name, String(c.eligible), String(c.pending), String(c.flippedWithout), String(c.missingOrStale), String(c.ghosts)]),
  ]);

  const defects = answers.filter((a) => a.outcome === "5xx" || a.outcome === "4xx").length;
  const lost = answers.filter((a) => a.outcome === "lost").length;
  const rowsLost = r.afterCursor.missingOrStale + r.afterFull.missingOrStale;
  const worst = Math.max(...recoveries);
  const lines: Array<[boolean, string]> = [
    [defects === 0, `GPU and /readyz answers 5xx other than 503, or 4xx: ${defects} (target 0)`],
    [badRuns.length === 0, `indexing runs answered other than 200, 409 or 503: ${badRuns.length} of ${runs.length} (target 0)`],
    [lost === 0, `requests lost (no answer within ${REQUEST_TIMEOUT_MS / 1000} s): ${lost} of ${answers.length} (target 0)`],
    [rowsLost === 0, `rows lost: ${rowsLost} (${r.before.flippedWithout} marked indexed without their document after the chaos; target 0)`],
    [r.afterCursor.ghosts + r.afterFull.ghosts === 0, `delisted products still in the index after the catch-up: ${r.afterCursor.ghosts + r.afterFull.ghosts} (target 0)`],
    [r.catchUp.every((run) => run.status === 200) && r.status.drift === 0 && r.status.pending_rows === 0,
      `catch-up runs ${r.catchUp.map((run) => run.status).join(", ")}; status drift ${r.status.drift}, pending_rows ${r.status.pending_rows} (target 200, 200; 0, 0)`],
    [worst < RECOVERY_TARGET_MS, `recovery after each fault ends, worst: ${ms(worst)} ms (target < ${RECOVERY_TARGET_MS} ms)`],
  ];
  console.log();
  for (const [ok, text] of lines) console.log(`${ok ? "ok  " : "MISS"} ${text}`);
  for (const run of badRuns) console.log(`     ${run.mode} run at ${s(run.sent)} s answered ${run.status || "nothing"} ${run.code}`);
  for (const a of answers.filter((x) => x.detail !== undefined)) console.log(`     ${a.route} at ${s(a.sent)} s answered ${a.status} ${a.detail}`);
  return lines.filter(([ok]) => !ok).length;
}

/** The service's error-level log lines (pino level 50 and above), each distinct one once: what to look at for a defect. */
function printErrorLines(logs: ReadonlyArray<Record<string, unknown>>): void {
  const lines = new Map<string, number>();
  for (const entry of logs.filter((e) => typeof e.level === "number" && e.level >= 50)) {
    const err = entry.err as { type?: string; message?: string } | undefined;
    const text = `${String(entry.msg)}${entry.rpc ? ` (${String(entry.rpc)})` : ""}${err ? `: ${err.type ?? "Error"} ${(err.message ?? "").slice(-160)}` : ""}`;
    lines.set(text, (lines.get(text) ?? 0) + 1);
  }
  console.log(`
service error-level log lines: ${[...lines.values()].reduce((a, b) => a + b, 0)}`);
  for (const [text, n] of lines) console.log(`     ${n} x ${text}`);
}

/** Milliseconds from `end` to the answer of the first request sent at or after it that `matches`; Infinity if none. */
function firstAfter(answers: Answer[], end: number, matches: (a: Answer) => boolean): number {
  return answers.filter((a) => a.sent >= end && matches(a)).reduce((best, a) => Math.min(best, a.answered - end), Number.POSITIVE_INFINITY);
}

function ms(value: number): string {
  return Number.isFinite(value) ? String(Math.round(value)) : "never";
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

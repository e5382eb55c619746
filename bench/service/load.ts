import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { Client } from "@elastic/elasticsearch";
import autocannon from "autocannon";
import { spawnService, type ServiceProcess } from "../../test/support/spawn-service.js";
import { deleteGoodsIndices } from "../../test/indexing/helpers.js";
import { admin, createInstances, databaseUrl, printTable, seedGoods, wholeNumber } from "../shared/support.js";

// npm run bench:load [-- --rows N]
//
// GPU API traffic while a full index runs in the same server, on loopback. The real service runs
// as a child process (its own event loop, as in production) on a scratch database of N generated
// goods (default 300,000) and a scratch index; autocannon cycles through GET /api/gpu/offers,
// POST /api/gpu/search-offers, GET /api/gpu/instances and GET /api/gpu/statistics: first alone
// (the baseline), then for as long as the full index takes. Prints requests/s, p99 and errors of
// both phases and the index's docs/s; exits 1 on any error or non-2xx answer, or when the index
// does not finish within --max-s seconds. Uses DATABASE_URL's server and ELASTICSEARCH_URL.

const elasticsearchUrl = process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9200";
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 10);

const MIX = [
  { method: "GET", path: "/api/gpu/offers?gpu_name=4090&max_price=2" },
  { method: "POST", path: "/api/gpu/search-offers", body: JSON.stringify({ min_gpu_ram: 16, max_price: 1.5, sort_by: "price_per_gpu", limit: 50 }) },
  { method: "GET", path: "/api/gpu/instances?limit=50" },
  { method: "GET", path: "/api/gpu/statistics" },
];

interface Phase {
  name: string;
  seconds: number;
  requests: number;
  rps: number;
  p99: number;
  errors: number;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { rows: { type: "string", default: "300000" }, "baseline-s": { type: "string", default: "10" }, "max-s": { type: "string", default: "180" } } });
  const rows = wholeNumber(values.rows, "--rows");
  const baselineS = wholeNumber(values["baseline-s"], "--baseline-s");
  const maxS = wholeNumber(values["max-s"], "--max-s");

  const dbName = `bench_${randomBytes(5).toString("hex")}`;
  const index = `bench_goods_${randomBytes(4).toString("hex")}`;
  const dbUrl = databaseUrl(dbName);
  const es = new Client({ node: elasticsearchUrl });
  await admin(`create database ${dbName}`);
  let service: ServiceProcess | undefined;
  try {
    const eligible = await seedGoods(dbUrl, rows);
    service = await spawnService({
      DATABASE_URL: dbUrl,
      ELASTICSEARCH_URL: elasticsearchUrl,
      GOODS_INDEX: index,
      SIM_CREATING_MS: "200",
      SIM_LOADING_MS: "200",
      SIM_MODEL_SERVER_START_MS: "200",
    });
    await createInstances(service.url);
    const failures = await run(service.url, { rows, eligible, baselineS, maxS });
    if (failures.length > 0) {
      console.error(`\nFAILED: ${failures.join("; ")}`);
      process.exitCode = 1;
    }
  } finally {
    await service?.stop("SIGTERM");
    // The scratch database goes whatever happened to the index (Elasticsearch may be the fault).
    await deleteGoodsIndices(es, index).catch(() => undefined);
    await es.close();
    await admin(`drop database if exists ${dbName} with (force)`);
  }
}

async function run(url: string, options: { rows: number; eligible: number; baselineS: number; maxS: number }): Promise<string[]> {
  await load(url, 2); // warm-up: connections, JIT, the database's caches
  const baseline = summarise("GPU API alone", await load(url, options.baselineS));

  const cannon = load(url, options.maxS);
  const started = performance.now();
  const indexed = await fetch(`${url}/api/search/v1/index/db/goods`).then(async (res) => ({ status: res.status, body: (await res.json()) as Record<string, unknown> }));
  const indexSeconds = (performance.now() - started) / 1000;
  cannon.stop();
  const during = summarise("GPU API during full index", await cannon);

  const indexedCount = Number(indexed.body.indexed_count ?? 0);
  console.log(`\nloopback, ${CONNECTIONS} connections cycling ${MIX.map((r) => `${r.method} ${r.path.split("?")[0]}`).join(", ")}\n`);
  printTable([
    ["phase", "seconds", "requests", "req/s", "p99 ms", "errors"],
    ...[baseline, during].map((p) => [p.name, p.seconds.toFixed(1), String(p.requests), p.rps.toFixed(0), p.p99.toFixed(1), String(p.errors)]),
  ]);
  console.log(`\nfull index: ${options.rows} rows, ${indexedCount} of ${options.eligible} eligible documents indexed in ${indexSeconds.toFixed(1)} s = ${Math.round(indexedCount / indexSeconds)} docs/s (HTTP ${indexed.status})`);

  const failures: string[] = [];
  for (const phase of [baseline, during]) if (phase.errors > 0) failures.push(`${phase.errors} errors in '${phase.name}'`);
  if (indexed.status !== 200 || indexedCount !== options.eligible) failures.push(`full index answered ${indexed.status}: ${JSON.stringify(indexed.body)}`);
  if (indexSeconds >= options.maxS) failures.push(`the full index took longer than --max-s ${options.maxS}`);
  return failures;
}

function load(url: string, seconds: number) {
  return autocannon({ url, connections: CONNECTIONS, duration: seconds, requests: MIX, headers: { "content-type": "application/json" } });
}

function summarise(name: string, result: Awaited<ReturnType<typeof load>>): Phase {
  const seconds = result.duration;
  return {
    name,
    seconds,
    requests: result.requests.total,
    rps: result.requests.total / seconds,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + result.non2xx,
  };
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

// npm run bench:api: the GPU API under load on loopback, at 100,000 stored instance records.
//
// Creates a throwaway PostgreSQL database (dropped at the end), seeds 100,000 records, serves
// GpuService through the same handler factory, interceptors and REST transcoder as the product,
// plus a bare no-op Connect service registered only here: the framework's own ceiling, measured
// in the same run. autocannon runs in a worker thread so that the load generator does not share
// the server's event loop.
import { randomBytes } from "node:crypto";
import { create, createFileRegistry, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import autocannon from "autocannon";
import pino from "pino";
import { loadConfig } from "../../src/config.js";
import { createKnex, migrateToLatest } from "../../src/db/knex.js";
import { createGpuModule } from "../../src/gpu/gpu-module.js";
import { createSimulatedMarketplace } from "../../src/gpu/marketplace/simulated/simulated.js";
import { createAppHandler } from "../../src/server/app.js";
import { createTokenSource } from "../../src/server/auth/token-source.js";
import { registration } from "../../src/server/service-registration.js";
import { listen } from "../../src/server/listen.js";
import { createMetrics } from "../../src/server/metrics.js";
import { createProxyLoad } from "../../src/server/proxy/proxy-load.js";
import { createProxyTraffic } from "../../src/server/proxy/proxy-traffic.js";
import { createKeyUsage } from "../../src/server/keys/key-usage.js";
import { admin, databaseUrl, printTable } from "../shared/support.js";

const RECORDS = 100_000;
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 4);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 10);

/** A service with one RPC that does nothing, described at run time so it exists only here. */
function noopService(): DescService {
  const file = create(FileDescriptorProtoSchema, {
    name: "bench/noop.proto",
    package: "bench.v1",
    syntax: "proto3",
    messageType: [{ name: "Empty" }],
    service: [{ name: "NoopService", method: [{ name: "Noop", inputType: ".bench.v1.Empty", outputType: ".bench.v1.Empty" }] }],
  });
  return createFileRegistry(file, () => undefined).getService("bench.v1.NoopService")!;
}

/** 100,000 records in one statement: mostly history (destroyed, failed), some live ones. */
const SEED_SQL = `
  insert into gpu_instances (instance_id, offer_id, image_name, status, gpu_info, cost_per_hour,
                             template_name, created_at, updated_at, destroyed_at, start_command)
  select 'gpu-' || (500000 + n), 'offer-' || (n % 320), 'vllm/vllm-openai:latest', s.status,
         jsonb_build_object('gpu_name', (array['RTX 4090','RTX 3090','A100 SXM4','H100 SXM','L40S','RTX A6000'])[1 + n % 6],
                            'num_gpus', 1 + n % 4, 'gpu_ram', 24),
         round((0.1 + (n % 97) * 0.03)::numeric, 4)::float8,
         (array['budget','research','high_performance', null])[1 + n % 4],
         c.created_at, c.created_at,
         case when s.status = 'destroyed' then c.created_at + ((n % 72) || ' hours')::interval end, ''
  from generate_series(1, ${RECORDS}) as n
  cross join lateral (select now() - ((n % 8760) || ' hours')::interval - ((n % 3600) || ' seconds')::interval as created_at) c
  cross join lateral (select case when n % 100 < 85 then 'destroyed' when n % 100 < 90 then 'failed'
                                  when n % 100 < 94 then 'exited' when n % 100 < 97 then 'running' else 'running_llm' end as status) s`;

interface Target {
  name: string;
  method: "GET" | "POST";
  path: string;
  body?: string;
  headers?: Record<string, string>;
}

interface Figures {
  rps: number;
  p99: number;
  errors: number;
}

async function measure(url: string, target: Target, duration = DURATION_S): Promise<Figures> {
  const result = await autocannon({
    url: `${url}${target.path}`,
    method: target.method,
    body: target.body,
    headers: { "content-type": "application/json", ...target.headers },
    connections: CONNECTIONS,
    duration,
    workers: 1,
  });
  return { rps: result.requests.average, p99: result.latency.p99, errors: result.errors + result.non2xx };
}

async function main(): Promise<void> {
  const name = `bench_${randomBytes(5).toString("hex")}`;
  await admin(`create database ${name}`);
  const knex = createKnex(databaseUrl(name), { poolMax: 10 });
  const marketplace = createSimulatedMarketplace({ creatingMs: 100, loadingMs: 100, modelServerStartMs: 100 });
  try {
    await migrateToLatest(knex);
    const seeded = Date.now();
    await knex.raw(SEED_SQL);
    await knex.raw("vacuum analyze gpu_instances");
    console.log(`seeded ${RECORDS} instance records in ${Date.now() - seeded} ms`);

    const config = loadConfig({ PORT: "0", GPU_STATUS_SYNC_MS: "60000" });
    const logger = pino({ level: "silent" });
    const metrics = createMetrics();
    const gpu = createGpuModule({ config, logger, knex, marketplace, metrics, proxyLoad: createProxyLoad(), proxyTraffic: createProxyTraffic(), keyUsage: createKeyUsage(), elasticsearch: undefined as never });
    const handler = createAppHandler({
      services: [gpu.service, registration(noopService(), { noop: () => ({}) } as never)],
      logger,
      tokens: createTokenSource({ envTokens: [], file: undefined, logger }),
      maxBodyBytes: config.maxBodyBytes,
      metrics,
      readiness: {},
    });
    const server = await listen({ handler, host: "127.0.0.1", port: 0 });
    await gpu.start();
    try {
      await run(server.url);
    } finally {
      await gpu.stop();
      await server.close(1000);
    }
  } finally {
    await marketplace.close();
    await knex.destroy();
    await admin(`drop database if exists ${name} with (force)`);
  }
}

async function run(url: string): Promise<void> {
  const created = await fetch(`${url}/api/gpu/instances/from-template?template_name=research`, { method: "POST" });
  const { instance_id: instanceId } = (await created.json()) as { instance_id: string };
  await waitForModelServer(url, instanceId);

  const noop: Target = { name: "no-op (Connect)", method: "POST", path: "/bench.v1.NoopService/Noop", body: "{}", headers: { "connect-protocol-version": "1" } };
  const targets: Target[] = [
    { name: "POST /api/gpu/search-offers", method: "POST", path: "/api/gpu/search-offers", body: JSON.stringify({ max_price: 1.0, min_gpu_ram: 16, sort_by: "price", limit: 20 }) },
    { name: "GET /api/gpu/instances (first page, 100)", method: "GET", path: "/api/gpu/instances" },
    { name: `GET /api/gpu/instances/{id}/enhanced`, method: "GET", path: `/api/gpu/instances/${instanceId}/enhanced` },
    { name: "GET /api/gpu/statistics", method: "GET", path: "/api/gpu/statistics" },
  ];
  // BENCH_ONLY=statistics measures only the endpoints whose name contains that text.
  const only = process.env.BENCH_ONLY;
  if (only) targets.splice(0, targets.length, ...targets.filter((t) => t.name.includes(only)));
  for (const target of [noop, ...targets]) await measure(url, target, 1); // warm-up
  // The machine may be shared: each endpoint is measured right after its own no-op run, so that
  // the ratio compares figures taken under the same conditions.
  const rows: string[][] = [];
  for (const target of targets) {
    const ceiling = await measure(url, noop);
    const figures = await measure(url, target);
    rows.push([
      target.name,
      fmt(figures.rps),
      fmt(figures.p99),
      fmt(ceiling.rps),
      fmt(ceiling.p99),
      (figures.rps / ceiling.rps).toFixed(2),
      String(figures.errors + ceiling.errors),
    ]);
  }
  console.log(`\n${RECORDS} records, ${CONNECTIONS} connections, ${DURATION_S} s per measurement\n`);
  printTable([["endpoint", "req/s", "p99 ms", "no-op req/s", "no-op p99 ms", "req/s vs no-op", "errors"], ...rows]);
}

async function waitForModelServer(url: string, instanceId: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const res = await fetch(`${url}/api/gpu/instances/${instanceId}/enhanced`);
    const body = (await res.json()) as { data?: { db_info?: { status?: string } } };
    if (body.data?.db_info?.status === "running_llm") return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`instance ${instanceId} did not reach running_llm`);
}

function fmt(value: number): string {
  return value >= 100 ? value.toFixed(0) : value.toFixed(1);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

// npm run bench:proxy: the endpoint proxy against nginx in front of the same replica, in one run.
//
// One replica (parts/sse-replica.ts: answers at once, a one-token answer or a 64-token stream), the
// service's endpoint proxy (the product's app handler over a fixed directory), nginx (parts/nginx.ts:
// one worker, keep-alive upstream), the floors of a Node proxy (parts/floor-proxies.ts: node:http's
// server passing requests on with node:http's client or with undici's, nothing else) and the load
// (autocannon) each run in a process of their own.
// For one-token answers and for streamed ones (real `stream: true` chat completions, which the
// proxy reads through its continuation reader), measured: requests/s at BENCH_IN_FLIGHT in
// flight, direct to the replica, through nginx and through the proxy, in rounds whose order
// rotates so that each sees the same conditions; latency at that load and one request at a time,
// and what each proxy adds over direct; the CPU per request (and per streamed chunk) of each proxy
// process alone, from the scheduler's count (bench/shared/support.ts). Last, the prefix index's cost: the proxy's CPU per request
// with `routing: prefix` against `least_outstanding` (parts/prefix-index-cost.ts; BENCH_ONLY=index
// runs only that). The machine may be shared: read the ratios, taken within the run, rather than
// the absolute figures.
import { loadavg } from "node:os";
import { checkStream, fmt, signed, type Route, type Throughput } from "./parts/http-timing.js";
import { startLoad, type Load } from "./parts/load-process.js";
import { findNginx, NGINX_MISSING, startNginx } from "./parts/nginx.js";
import { ONE_TOKEN, spawnPart, targetOf, TOKEN } from "./parts/processes.js";
import { measureIndexCost, type IndexCostOptions } from "./parts/prefix-index-cost.js";
import { STREAM_CHUNKS, STREAMED_64 } from "./parts/sse-replica.js";
import { printTable, processCpuSeconds } from "../shared/support.js";

const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 32);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** The index's few microseconds a request need more rounds, and shorter ones (paired closer in time), than the proxies' differences. */
const INDEX_ROUNDS = Number(process.env.BENCH_INDEX_ROUNDS ?? 15);
const INDEX_DURATION_S = Number(process.env.BENCH_INDEX_DURATION_S ?? 3);
/**
 * The index's rounds run at this many requests a second (0: as many as the proxy answers). Below
 * what the proxy can answer both endpoints do the same work each second, and the rounds' ratios
 * spread half as wide as at saturation, where the CPU's share decides how requests batch.
 */
const INDEX_RATE = Number(process.env.BENCH_INDEX_RATE ?? 2500) || undefined;
/** The same for the index's streamed workload: a 64-token answer is several times a one-token answer's work. */
const INDEX_STREAM_RATE = Number(process.env.BENCH_INDEX_STREAM_RATE ?? 500) || undefined;
/**
 * The index's measure as set above. BENCH_INDEX_TARGET_ONLY=1 runs only the workload judged against
 * the goal: three times the rounds in the same time, for a machine whose rounds spread wide.
 */
const INDEX_OPTIONS: IndexCostOptions = { inFlight: IN_FLIGHT, durationS: INDEX_DURATION_S, rounds: INDEX_ROUNDS, rate: INDEX_RATE, streamRate: INDEX_STREAM_RATE, targetOnly: process.env.BENCH_INDEX_TARGET_ONLY === "1" };
const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 1000);

const TARGETS = ["direct", "nginx", "floor-http", "floor-undici", "proxy"] as const;
type Target = (typeof TARGETS)[number];
type Proxy = Exclude<Target, "direct">;

interface Figures {
  rps: number;
  /** At IN_FLIGHT in flight, ms. */
  p50: number;
  p99: number;
  /** One request at a time, µs. */
  alone: { p50: number; p99: number };
  /** CPU of the proxy process per request, µs (0 for direct). */
  cpuUs: number;
  errors: number;
}

/** A warm-up round, then ROUNDS rounds of the three in rotated order, then requests one at a time. */
async function measure(load: Load, routes: Record<Target, Route>, cpu: Record<Proxy, () => number>, body: string): Promise<Record<Target, Figures>> {
  for (const target of TARGETS) await load.throughput(routes[target], body, IN_FLIGHT, DURATION_S);
  const runs = Object.fromEntries(TARGETS.map((t) => [t, [] as Array<Throughput & { cpuUs: number }>])) as Record<Target, Array<Throughput & { cpuUs: number }>>;
  for (let round = 0; round < ROUNDS; round++) {
    for (const target of [...TARGETS.slice(round % TARGETS.length), ...TARGETS.slice(0, round % TARGETS.length)]) {
      const cpuOf = target === "direct" ? () => 0 : cpu[target];
      const before = cpuOf();
      const run = await load.throughput(routes[target], body, IN_FLIGHT, DURATION_S);
      runs[target].push({ ...run, cpuUs: ((cpuOf() - before) / Math.max(1, run.total)) * 1e6 });
    }
  }
  const alone = await load.alternate([...TARGETS].map((t) => routes[t]), body, SEQUENTIAL, "end");
  const mean = (target: Target, f: (r: Throughput & { cpuUs: number }) => number) => runs[target].reduce((sum, r) => sum + f(r), 0) / runs[target].length;
  return Object.fromEntries(
    TARGETS.map((t, i) => [
      t,
      { rps: mean(t, (r) => r.rps), p50: mean(t, (r) => r.p50), p99: mean(t, (r) => r.p99), alone: alone[i]!, cpuUs: mean(t, (r) => r.cpuUs), errors: runs[t].reduce((sum, r) => sum + r.errors, 0) },
    ]),
  ) as Record<Target, Figures>;
}

function report(title: string, f: Record<Target, Figures>, chunks: number): void {
  const ratio = (a: number, b: number) => (b > 0 ? (a / b).toFixed(2) : "");
  const added = (t: Target, pick: (x: Figures) => { p50: number; p99: number }) => (t === "direct" ? "" : `${signed(pick(f[t]).p50 - pick(f.direct).p50)} / ${signed(pick(f[t]).p99 - pick(f.direct).p99)}`);
  const atLoad = (x: Figures) => ({ p50: x.p50, p99: x.p99 });
  const row = (label: string, cell: (t: Target) => string) => [label, ...TARGETS.map(cell)];
  console.log(`\n${title}\n`);
  const rows = [
    ["", ...TARGETS],
    row("req/s", (t) => fmt(f[t].rps)),
    row("  / direct", (t) => (t === "direct" ? "" : ratio(f[t].rps, f.direct.rps))),
    row(`p50 / p99 ms at ${IN_FLIGHT} in flight`, (t) => `${fmt(f[t].p50)} / ${fmt(f[t].p99)}`),
    row("  added over direct, ms", (t) => added(t, atLoad)),
    row("one at a time p50 / p99 us", (t) => `${fmt(f[t].alone.p50)} / ${fmt(f[t].alone.p99)}`),
    row("  added over direct, us", (t) => added(t, (x) => x.alone)),
    row("CPU per request us, the proxy process alone", (t) => (t === "direct" ? "" : fmt(f[t].cpuUs))),
    row("  / nginx's", (t) => (t === "direct" || t === "nginx" ? "" : ratio(f[t].cpuUs, f.nginx.cpuUs))),
  ];
  if (chunks > 1) rows.push(row(`CPU per chunk us (${chunks} a stream)`, (t) => (t === "direct" ? "" : fmt(f[t].cpuUs / chunks))));
  rows.push(row("errors", (t) => String(f[t].errors)));
  printTable(rows);
  const verdict = (ok: boolean) => (ok ? "met" : "MISSED");
  const cpu = f.proxy.cpuUs / f.nginx.cpuUs;
  const rps = f.proxy.rps / f.direct.rps;
  console.log(`targets: proxy CPU per ${chunks > 1 ? "chunk" : "request"} <= 3x nginx's: ${cpu.toFixed(2)}x ${verdict(cpu <= 3)}; req/s >= 0.5 of direct: ${rps.toFixed(2)} ${verdict(rps >= 0.5)}`);
  console.log(`the proxy's own work over the floor of its client (undici): ${signed(f.proxy.cpuUs - f["floor-undici"].cpuUs)} us per request, ${(f.proxy.cpuUs / f["floor-undici"].cpuUs).toFixed(2)}x the floor's CPU (target <= 1.25x)`);
}

/** The prefix index's cost alone (BENCH_ONLY=index): no nginx, no floors. */
async function indexOnly(): Promise<void> {
  const replica = await spawnPart("sse-replica");
  const load = await startLoad();
  try {
    await measureIndexCost(load, replica, INDEX_OPTIONS);
  } finally {
    for (const part of [load.part, replica]) part.child.kill("SIGTERM");
  }
}

async function main(): Promise<void> {
  if (process.env.BENCH_ONLY === "index") return indexOnly();
  const binary = findNginx();
  if (binary === undefined) {
    console.error(NGINX_MISSING);
    process.exit(1);
  }
  const replica = await spawnPart("sse-replica");
  const proxy = await spawnPart("proxy", [JSON.stringify({ one: [targetOf(replica, "gpu-bench-replica")] })]);
  const nginx = await startNginx(binary, replica.port);
  const floorHttp = await spawnPart("floor", ["node-http", String(replica.port)]);
  const floorUndici = await spawnPart("floor", ["undici", String(replica.port)]);
  const load = await startLoad();
  try {
    const routes: Record<Target, Route> = {
      direct: { port: replica.port, path: "/v1/chat/completions", headers: {} },
      nginx: { port: nginx.port, path: "/v1/chat/completions", headers: {} },
      "floor-http": { port: floorHttp.port, path: "/endpoints/one/v1/chat/completions", headers: {} },
      "floor-undici": { port: floorUndici.port, path: "/endpoints/one/v1/chat/completions", headers: {} },
      proxy: { port: proxy.port, path: "/endpoints/one/v1/chat/completions", headers: { authorization: `Bearer ${TOKEN}` } },
    };
    const cpuOf = (part: { child: { pid?: number } }) => () => processCpuSeconds(part.child.pid!);
    const cpu: Record<Proxy, () => number> = { nginx: nginx.cpuSeconds, "floor-http": cpuOf(floorHttp), "floor-undici": cpuOf(floorUndici), proxy: cpuOf(proxy) };
    for (const target of TARGETS) await checkStream(routes[target], STREAMED_64);
    console.log(`${nginx.version} (1 worker), Node's floors (node:http's server with node:http's client, and with undici's: 1 process each) and the endpoint proxy (1 process) in front of one replica answering at once; load average at the start ${loadavg().map((l) => l.toFixed(1)).join(" ")}`);
    console.log(`${IN_FLIGHT} in flight, ${ROUNDS} rounds of ${DURATION_S} s each (${TARGETS.join(", ")} in rotated order), then ${SEQUENTIAL} requests one at a time on each`);
    report("one-token chat completions", await measure(load, routes, cpu, ONE_TOKEN), 1);
    report(`streamed chat completions (stream: true), ${STREAM_CHUNKS} events each, whole answer timed`, await measure(load, routes, cpu, STREAMED_64), STREAM_CHUNKS);
    await measureIndexCost(load, replica, INDEX_OPTIONS);
  } finally {
    for (const part of [load.part, proxy, floorHttp, floorUndici, replica]) part.child.kill("SIGTERM");
    nginx.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

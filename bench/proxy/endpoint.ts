// npm run bench:endpoint: the endpoint proxy against direct calls to one replica, in the same run.
//
// The load, the proxy (the product's app handler over a fixed directory of replicas) and three
// replicas (simulated model servers, the component the simulated marketplace runs) each run in a
// process of their own, so that no part shares an event loop with another. Measured: requests/s
// at 32 in flight with one-token answers (autocannon), against a replica that answers at once (the
// proxy's own ceiling: it does twice a replica's socket work) and one that takes 10 ms to its
// first token; latency added one request at a time (p50/p99, microseconds); the streamed first
// byte; the proxy's CPU per request. Then its CPU per streamed chunk, a streamed completion read
// through its continuation reader against the same stream passed on untouched
// (parts/endpoint-streams.ts). Then the faults: under steady streaming load over two
// replicas one replica's process is killed (requests failed before and after their answer
// started); and on the real service (its controller, directory and proxy, on the simulated
// marketplace) one replica's machine exits (failed requests, the time back to full strength, the
// endpoint's events). Last, the cold start: 32 requests at once at an idle endpoint (scaled to
// zero), held through the rental and the model's start, all answered. The machine may be shared: every figure is noisy, and each pair is taken
// alternately, direct then proxy, so that both see the same conditions.
import { Agent, request } from "node:http";
import { createElasticsearchClient } from "../../src/elasticsearch-client.js";
import { createSimulatedMarketplace } from "../../src/gpu/marketplace/simulated/simulated.js";
import { createTestDatabase } from "../../test/support/postgres.js";
import { startTestServer } from "../../test/support/server.js";
import { compareStreamReading } from "./parts/endpoint-streams.js";
import { alternateCalls, fmt, signed, throughput, type Route, type Throughput } from "./parts/http-timing.js";
import { MODEL, ONE_TOKEN, spawnPart, targetOf, TOKEN, type Part } from "./parts/processes.js";
import { adminDatabaseUrl, printTable, processCpuSeconds } from "../shared/support.js";

const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 32);
const SLOW_FIRST_TOKEN_MS = 10;
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);
const SEQUENTIAL = Number(process.env.BENCH_SEQUENTIAL ?? 2000);
const STREAMED = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Say hi" }], max_tokens: 8, stream: true });

/** `n` requests one at a time, alternating direct and proxy; the percentiles of each, in microseconds. */
async function alternate(direct: Route, proxy: Route, body: string, n: number, pick: (t: { firstUs: number; endUs: number }) => number) {
  const [d, p] = await alternateCalls([direct, proxy], body, n, pick);
  return { direct: d!, proxy: p! };
}

/** Streaming load on `route` with `inFlight` loops until `stop`; counts how requests ended. */
function steadyLoad(route: Route, inFlight: number) {
  const tally = { ok: 0, failedBeforeAnswer: 0, cutAfterStart: 0, byInstance: new Map<string, number>() };
  let running = true;
  const agent = new Agent({ keepAlive: true, maxSockets: inFlight });
  const one = () =>
    new Promise<void>((resolve) => {
      let started = false;
      const req = request({ agent, host: "127.0.0.1", port: route.port, path: route.path, method: "POST", headers: { "content-type": "application/json", ...route.headers } }, (res) => {
        if (res.statusCode !== 200) {
          tally.failedBeforeAnswer += 1;
          res.resume();
          res.once("end", resolve);
          return;
        }
        started = true;
        const instance = String(res.headers["x-endpoint-instance"]);
        let text = "";
        res.on("data", (chunk: Buffer) => (text += chunk.toString()));
        res.once("end", () => {
          if (text.endsWith("data: [DONE]\n\n")) {
            tally.ok += 1;
            tally.byInstance.set(instance, (tally.byInstance.get(instance) ?? 0) + 1);
          } else tally.cutAfterStart += 1;
          resolve();
        });
        res.once("error", () => {
          tally.cutAfterStart += 1;
          resolve();
        });
      });
      req.once("error", () => {
        if (!started) tally.failedBeforeAnswer += 1;
        resolve();
      });
      req.end(STREAMED);
    });
  const loops = Array.from({ length: inFlight }, async () => {
    while (running) await one();
  });
  return {
    tally,
    async stop() {
      running = false;
      await Promise.all(loops);
      agent.destroy();
    },
  };
}

/** req/s at 32 in flight, two rounds alternating direct and proxy, and the proxy's CPU per request. */
async function compareThroughput(proxyPid: number, direct: Route, proxied: Route) {
  await throughput(direct, ONE_TOKEN, IN_FLIGHT, DURATION_S);
  await throughput(proxied, ONE_TOKEN, IN_FLIGHT, DURATION_S);
  const rounds: Array<{ direct: Throughput; proxy: Throughput; cpuUs: number }> = [];
  for (let i = 0; i < 2; i++) {
    const d = await throughput(direct, ONE_TOKEN, IN_FLIGHT, DURATION_S);
    const cpuBefore = processCpuSeconds(proxyPid);
    const p = await throughput(proxied, ONE_TOKEN, IN_FLIGHT, DURATION_S);
    rounds.push({ direct: d, proxy: p, cpuUs: ((processCpuSeconds(proxyPid) - cpuBefore) / p.total) * 1e6 });
  }
  const mean = (f: (r: (typeof rounds)[number]) => number) => rounds.reduce((sum, r) => sum + f(r), 0) / rounds.length;
  return {
    directRps: mean((r) => r.direct.rps),
    proxyRps: mean((r) => r.proxy.rps),
    latency: `${fmt(mean((r) => r.direct.p50))} / ${fmt(mean((r) => r.direct.p99))}`,
    proxyLatency: `${fmt(mean((r) => r.proxy.p50))} / ${fmt(mean((r) => r.proxy.p99))}`,
    errors: [rounds.reduce((sum, r) => sum + r.direct.errors, 0), rounds.reduce((sum, r) => sum + r.proxy.errors, 0)],
    cpuUs: mean((r) => r.cpuUs),
  };
}

async function main(): Promise<void> {
  // BENCH_ONLY=service runs only the fault on the service, BENCH_ONLY=cold only the cold start,
  // BENCH_ONLY=streams only the streamed answers read (continuation) against passed on untouched.
  if (process.env.BENCH_ONLY === "service") return faultOnService();
  if (process.env.BENCH_ONLY === "cold") return coldStart();
  if (process.env.BENCH_ONLY === "streams") return compareStreamReading({ inFlight: IN_FLIGHT, durationS: DURATION_S });

  // a and b answer at once (the proxy's own ceiling); c takes 10 ms to its first token, as a small
  // model on a GPU takes at least to read a prompt.
  const replicas = await Promise.all([
    spawnPart("model-server", ["gpu-bench-a", "0"]),
    spawnPart("model-server", ["gpu-bench-b", "0"]),
    spawnPart("model-server", ["gpu-bench-c", String(SLOW_FIRST_TOKEN_MS)]),
  ]);
  const [a, b, c] = replicas.map((r, i) => targetOf(r, `gpu-bench-${"abc"[i]}`));
  const proxy = await spawnPart("proxy", [JSON.stringify({ one: [a], slow: [c], two: [a, b] })]);
  const parts = [...replicas, proxy];
  try {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const direct: Route = { port: replicas[0]!.port, path: "/v1/chat/completions", headers: {} };
    const proxied: Route = { port: proxy.port, path: "/endpoints/one/v1/chat/completions", headers: auth };
    const instant = await compareThroughput(proxy.child.pid!, direct, proxied);
    const slow = await compareThroughput(
      proxy.child.pid!,
      { port: replicas[2]!.port, path: "/v1/chat/completions", headers: {} },
      { port: proxy.port, path: "/endpoints/slow/v1/chat/completions", headers: auth },
    );
    const added = await alternate(direct, proxied, ONE_TOKEN, SEQUENTIAL, (t) => t.endUs);
    const firstByte = await alternate(direct, proxied, STREAMED, Math.max(50, Math.floor(SEQUENTIAL / 4)), (t) => t.firstUs);

    const addedP50 = (added.proxy.p50 - added.direct.p50) / 1000;
    const ratio = (t: typeof instant) => t.proxyRps / t.directRps;
    console.log(`\n${IN_FLIGHT} in flight, ${DURATION_S} s per autocannon run (2 rounds, alternating), ${SEQUENTIAL} sequential pairs, one-token chat completions\n`);
    printTable([
      ["", "direct", "proxy", "proxy / direct", "target"],
      ["req/s, replica answering at once", fmt(instant.directRps), fmt(instant.proxyRps), ratio(instant).toFixed(3), `>= 0.90 ${ratio(instant) >= 0.9 ? "met" : "MISSED"}`],
      [`req/s, replica ${SLOW_FIRST_TOKEN_MS} ms to first token`, fmt(slow.directRps), fmt(slow.proxyRps), ratio(slow).toFixed(3), `>= 0.90 ${ratio(slow) >= 0.9 ? "met" : "MISSED"}`],
      ["p50 / p99 ms at 32 in flight, at once", instant.latency, instant.proxyLatency, "", ""],
      [`p50 / p99 ms at 32 in flight, ${SLOW_FIRST_TOKEN_MS} ms`, slow.latency, slow.proxyLatency, "", ""],
      ["one at a time p50 / p99 us", `${fmt(added.direct.p50)} / ${fmt(added.direct.p99)}`, `${fmt(added.proxy.p50)} / ${fmt(added.proxy.p99)}`, `${signed(added.proxy.p50 - added.direct.p50)} / ${signed(added.proxy.p99 - added.direct.p99)} us`, `p50 <= 1 ms ${addedP50 <= 1 ? "met" : "MISSED"}`],
      ["streamed first byte p50 / p99 us", `${fmt(firstByte.direct.p50)} / ${fmt(firstByte.direct.p99)}`, `${fmt(firstByte.proxy.p50)} / ${fmt(firstByte.proxy.p99)}`, `${signed(firstByte.proxy.p50 - firstByte.direct.p50)} us`, ""],
      ["errors (direct, proxy)", String(instant.errors[0]! + slow.errors[0]!), String(instant.errors[1]! + slow.errors[1]!), "", "0"],
      ["proxy CPU per request us, at once / 10 ms", "", `${fmt(instant.cpuUs)} / ${fmt(slow.cpuUs)}`, "", ""],
    ]);

    await faultPart(proxy, replicas[1]!);
  } finally {
    for (const part of parts) part.child.kill("SIGTERM");
  }
  await compareStreamReading({ inFlight: IN_FLIGHT, durationS: DURATION_S });
  await faultOnService();
  await coldStart();
}

/** Clocks of the fault run on the service: a machine runs 1.5 s after its rental, probes every second. */
const SERVICE_CLOCKS = {
  GPU_STATUS_SYNC_MS: "1000",
  GPU_ENDPOINT_PROBE_MS: "1000",
  GPU_ENDPOINT_READY_AFTER: "2",
  GPU_ENDPOINT_UNHEALTHY_MS: "10000",
  GPU_STATUS_CACHE_MS: "0",
};

/**
 * The real service (its controller, its directory from PostgreSQL, its proxy) with an endpoint of
 * two replicas on the simulated marketplace; under steady streaming load one replica's machine
 * exits (its model server with it). Failed requests, and the time until two replicas are ready
 * again, as the endpoint's status and events show it.
 */
async function faultOnService(): Promise<void> {
  // The tests' database helper takes its server from DATABASE_URL; a bench run defaults it as every bench does.
  process.env.DATABASE_URL ??= adminDatabaseUrl();
  const db = await createTestDatabase();
  const market = createSimulatedMarketplace({ creatingMs: 500, loadingMs: 500, modelServerStartMs: 500 });
  const server = await startTestServer({ knex: db.knex, elasticsearch: createElasticsearchClient("http://127.0.0.1:9"), marketplace: market, env: SERVICE_CLOCKS });
  const api = (method: string, path: string, body?: unknown) =>
    fetch(`${server.url}${path}`, { method, headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }).then((r) => r.json() as Promise<Record<string, unknown>>);
  type Endpoint = { state: string; ready_replicas: number; instances?: Array<{ instance_id: string; state: string }> };
  const until = async (what: string, test: (e: Endpoint) => boolean, timeoutMs = 60_000): Promise<Endpoint> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const endpoint = (await api("GET", "/api/gpu/endpoints/bench")) as unknown as Endpoint;
      if (test(endpoint)) return endpoint;
      if (Date.now() > deadline) throw new Error(`endpoint never ${what}: ${JSON.stringify(endpoint)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  try {
    await api("POST", "/api/gpu/endpoints", { name: "bench", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    const ready = await until("ready", (e) => e.state === "ready");
    const victim = ready.instances!.find((i) => i.state === "ready")!.instance_id;
    const load = steadyLoad({ port: server.port, path: "/endpoints/bench/v1/chat/completions", headers: {} }, 16);
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const before = { ...load.tally };
    const { market_instance_id: marketId } = (await db.knex("gpu_instances").where({ instance_id: victim }).first()) as { market_instance_id: string };
    const killedAt = Date.now();
    await market.exitInstance(marketId);
    const outOfRouting = await until("lost a replica", (e) => e.ready_replicas < 2, 30_000).then(() => Date.now() - killedAt);
    const back = await until("back to two ready replicas", (e) => e.state === "ready" && e.ready_replicas === 2 && !e.instances!.some((i) => i.instance_id === victim && i.state === "ready"));
    const fullAt = Date.now() - killedAt;
    await new Promise((resolve) => setTimeout(resolve, 2000));
    await load.stop();
    const after = load.tally;
    const events = ((await api("GET", "/api/gpu/endpoints/bench/events?limit=100")).events as Array<{ at: string; kind: string; instance_id?: string; detail: string }>).reverse();
    console.log(`\nfault on the service: endpoint of 2 replicas (simulated marketplace, a machine runs 1.5 s after its rental; probes every 1 s, ready after 2), 16 streams in flight; ${victim}'s machine exits after 3 s\n`);
    printTable([
      ["", "before the exit", "from the exit to the end"],
      ["answers complete", String(before.ok), String(after.ok - before.ok)],
      ["failed before their answer started", String(before.failedBeforeAnswer), String(after.failedBeforeAnswer - before.failedBeforeAnswer)],
      ["cut after their answer started", String(before.cutAfterStart), String(after.cutAfterStart - before.cutAfterStart)],
    ]);
    console.log(`\nready replicas below 2 seen after ${(outOfRouting / 1000).toFixed(1)} s; back to 2 ready (${back.instances!.filter((i) => i.state === "ready").map((i) => i.instance_id).join(", ")}) after ${(fullAt / 1000).toFixed(1)} s`);
    console.log("events, from the exit on:");
    for (const e of events.filter((e) => Date.parse(e.at) >= killedAt - 500)) console.log(`  +${((Date.parse(e.at) - killedAt) / 1000).toFixed(1)} s  ${e.kind}${e.instance_id ? ` ${e.instance_id}` : ""}: ${e.detail}`);
  } finally {
    await api("DELETE", "/api/gpu/endpoints/bench").catch(() => undefined);
    await server.close();
    await market.close();
    await db.drop();
  }
}

/** Clocks of the cold start: a machine runs 1 s after its rental and its model answers 1 s later. */
const COLD_MARKET = { creatingMs: 500, loadingMs: 500, modelServerStartMs: 1000 };
const COLD_REQUESTS = 32;

/**
 * The real service with an idle endpoint (autoscaled, scaled to zero): 32 requests arrive at once,
 * are held by the proxy, wake the endpoint, and go to its first ready replica. All must be
 * answered; the time to the first and last answer is set against the replica's own start (its
 * rental to its `ready` event), which no request can beat.
 */
async function coldStart(): Promise<void> {
  process.env.DATABASE_URL ??= adminDatabaseUrl();
  const db = await createTestDatabase();
  const market = createSimulatedMarketplace(COLD_MARKET);
  const server = await startTestServer({ knex: db.knex, elasticsearch: createElasticsearchClient("http://127.0.0.1:9"), marketplace: market, env: SERVICE_CLOCKS });
  const api = (method: string, path: string, body?: unknown) =>
    fetch(`${server.url}${path}`, { method, headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }).then((r) => r.json() as Promise<Record<string, unknown>>);
  try {
    const autoscale = { min_replicas: 0, max_replicas: 2, target_in_flight: 32, scale_up_after_s: 0, scale_down_after_s: 600 };
    await api("POST", "/api/gpu/endpoints", { name: "cold", template_name: "budget", max_cost_per_hour: 5, autoscale });
    const sent = Date.now();
    const answers = await Promise.all(
      Array.from({ length: COLD_REQUESTS }, async () => {
        const res = await fetch(`${server.url}/endpoints/cold/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: ONE_TOKEN });
        await res.arrayBuffer();
        return { status: res.status, ms: Date.now() - sent };
      }),
    );
    const events = ((await api("GET", "/api/gpu/endpoints/cold/events?limit=100")).events as Array<{ at: string; kind: string; instance_id?: string; detail: string }>).reverse();
    const at = (kind: string) => events.find((e) => e.kind === kind);
    const ready = at("ready")!;
    const { created_at: rentedAt } = (await db.knex("gpu_instances").where({ instance_id: ready.instance_id }).first()) as { created_at: Date };
    const replicaStart = Date.parse(ready.at) - rentedAt.getTime();
    const times = answers.map((a) => a.ms).sort((a, b) => a - b);
    const ok = answers.filter((a) => a.status === 200).length;
    console.log(`\ncold start on the service: an idle endpoint (autoscaled, at zero); ${COLD_REQUESTS} one-token requests at once (a machine runs 1 s after its rental, its model 1 s later; probes every 1 s, ready after 2)\n`);
    printTable([
      ["", "seconds from the requests' arrival"],
      ["woke (a held request seen by the controller)", ((Date.parse(at("woke")!.at) - sent) / 1000).toFixed(1)],
      ["replica rented", ((rentedAt.getTime() - sent) / 1000).toFixed(1)],
      ["replica ready", ((Date.parse(ready.at) - sent) / 1000).toFixed(1)],
      ["first answer", (times[0]! / 1000).toFixed(1)],
      ["last answer", (times.at(-1)! / 1000).toFixed(1)],
      ["the replica's own start (rented to ready)", (replicaStart / 1000).toFixed(1)],
      ["last answer minus the replica's own start", ((times.at(-1)! - replicaStart) / 1000).toFixed(1)],
    ]);
    console.log(`\nanswered ${ok} of ${COLD_REQUESTS} (200), ${COLD_REQUESTS - ok} not; target: all answered`);
  } finally {
    await api("DELETE", "/api/gpu/endpoints/cold").catch(() => undefined);
    await server.close();
    await market.close();
    await db.drop();
  }
}

/** Steady streaming load over both replicas; one replica's process killed mid-run. */
async function faultPart(proxy: Part, victim: Part): Promise<void> {
  const route: Route = { port: proxy.port, path: "/endpoints/two/v1/chat/completions", headers: { authorization: `Bearer ${TOKEN}` } };
  const load = steadyLoad(route, 16);
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const before = { ...load.tally, byInstance: new Map(load.tally.byInstance) };
  victim.child.kill("SIGKILL");
  const killedAt = Date.now();
  await new Promise((resolve) => setTimeout(resolve, 3000));
  await load.stop();
  const after = load.tally;
  console.log(`\nfault: 16 streams in flight over 2 replicas (8 tokens, 20 ms apart), gpu-bench-b's process killed after 3 s, 3 s more\n`);
  printTable([
    ["", "before the kill", "after the kill"],
    ["answers complete", String(before.ok), String(after.ok - before.ok)],
    ["  of which gpu-bench-b", String(before.byInstance.get("gpu-bench-b") ?? 0), String((after.byInstance.get("gpu-bench-b") ?? 0) - (before.byInstance.get("gpu-bench-b") ?? 0))],
    ["failed before their answer started", String(before.failedBeforeAnswer), String(after.failedBeforeAnswer - before.failedBeforeAnswer)],
    ["cut after their answer started", String(before.cutAfterStart), String(after.cutAfterStart - before.cutAfterStart)],
  ]);
  const metrics = await (await fetch(`http://127.0.0.1:${proxy.port}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  const retries = /^gpu_endpoint_retries_total\{endpoint="two"\} (\d+)/m.exec(metrics)?.[1] ?? "0";
  console.log(`\nthe killed replica stays in the fixed directory for ${((Date.now() - killedAt) / 1000).toFixed(1)} s; the proxy retried ${retries} requests on the other (a refused replica is passed over for 5 s at a time).`);
  console.log("(the fixed directory never replaces it: the time back to full strength is measured on the service, below)");
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

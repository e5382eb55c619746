// npm run bench:keys: what keys with limits cost the proxy and PostgreSQL, and whether their limits
// hold across processes (docs/keys.md), in one run.
//
// The built service (as `npm start` runs it) on a database of its own, on the remote marketplace's
// contract (parts/remote-market.ts), whose every machine is one bench replica in a process of its
// own (parts/sse-replica.ts: a one-token answer at once, usage 21 prompt + 1 completion tokens), so
// that the service process's CPU is the proxy's alone. The service reaches PostgreSQL through a
// relay that counts its statements (parts/pg-statements.ts). The load (autocannon) runs in a process
// of its own (parts/load-process.ts). One endpoint, priced (token_price), with one replica.
//
// 1. CPU per request: a key with every limit (rpm_limit, tpm_limit, max_parallel_requests,
//    max_budget) set too high to refuse anything, against a static token (AUTH_TOKENS), on the same
//    service process, endpoint and replica, at BENCH_IN_FLIGHT in flight, BENCH_ROUNDS rounds of
//    BENCH_DURATION_S in alternating order after a warm-up of each; CPU from the scheduler's count of the
//    service process. Goal: the key at most 1.10x the static token.
// 2. Statements a second: the statements the service sends PostgreSQL (each simple query and each
//    Execute, begin and commit included; PostgreSQL 15 without pg_stat_statements cannot say it), by
//    kind, over BENCH_STATEMENTS_S seconds idle, then at 500 requests a second (autocannon's
//    overallRate) with the static token, then with the key. What the key adds is its lease
//    renewals (docs/keys.md, "Statements a second": at most two a second per key and process).
//    The service process's CPU per request at that rate is printed too: the same load for both.
// 3. Limits across processes: a second service process on the same database; 64 callers, 32 on
//    each process, for BENCH_KEYS_LIMIT_S (default 60) seconds against one key with tpm_limit and
//    max_budget (budget_duration 1d), in two phases of a key each. Within a minute no token leaves
//    tpm_limit's window, and the replica's answers are all alike, so tokens and dollars grow
//    together: in one phase of a minute only one of the two limits can be the one that refuses (and
//    a spent budget is named first). So (a) a key whose tpm_limit binds, about halfway through the
//    first minute at part 1's rate (BENCH_KEYS_TPM sets it), with a budget that could pay twice
//    that; (b) a key whose max_budget binds, about halfway through the run at (a)'s rate, with a
//    tpm_limit twice what that rate takes in a minute. Printed per process and in total: tokens
//    admitted in each minute and in the fullest 60 s against tpm_limit, dollars admitted against
//    max_budget (from the answers' usage at the endpoint's price, and the service's own period
//    spend), refusals by code, when the first came. Goal: never over, at least 95% of the binding
//    limit used.
//
// BENCH_ONLY=one-process runs parts 1 and 2 alone. The machine may be shared: read the ratios,
// taken within the run, rather than the absolute figures.
import { loadavg } from "node:os";
import { fmt, type Route, type Throughput } from "./parts/http-timing.js";
import { runCallers, type CallerFigures } from "./parts/key-callers.js";
import { startLoad, type Load } from "./parts/load-process.js";
import { startStatementCounter, type StatementCounter, type StatementCounts } from "./parts/pg-statements.js";
import { ONE_TOKEN, spawnPart, TOKEN } from "./parts/processes.js";
import { MARKET_KEY, startRemoteMarket } from "./parts/remote-market.js";
import { adminDatabaseUrl, printTable, processCpuSeconds } from "../shared/support.js";
import { createTestDatabase } from "../../test/support/postgres.js";
import { spawnService, type ServiceProcess } from "../../test/support/spawn-service.js";

const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 32);
const DURATION_S = Number(process.env.BENCH_DURATION_S ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const STATEMENTS_S = Number(process.env.BENCH_STATEMENTS_S ?? 10);
const RATE = 500;
const LIMIT_S = Number(process.env.BENCH_KEYS_LIMIT_S ?? 60);
const CALLERS = 64;
const ENDPOINT = "one";
/** Dollars per million tokens: micro-dollars per token. */
const PRICE = { input_per_mtok: 10, output_per_mtok: 30 };
/** What the replica counts for each answer (sse-replica.ts): 21 prompt and 1 completion tokens. */
const ANSWER_TOKENS = 22;
const ANSWER_MICROS = 21 * PRICE.input_per_mtok + PRICE.output_per_mtok;
const SERVICE_ENV = {
  MARKETPLACE: "remote",
  MARKETPLACE_API_KEY: MARKET_KEY,
  AUTH_TOKENS: TOKEN,
  ELASTICSEARCH_URL: process.env.ELASTICSEARCH_URL ?? "http://127.0.0.1:9",
  INDEX_LIVE: "false",
  GPU_STATUS_SYNC_MS: "1000",
  GPU_STATUS_CACHE_MS: "0",
  GPU_ENDPOINT_PROBE_MS: "1000",
  GPU_ENDPOINT_READY_AFTER: "2",
};

type Api = (method: string, path: string, body?: unknown) => Promise<{ status: number; body: Record<string, unknown> }>;

function apiOf(service: ServiceProcess): Api {
  return async (method, path, body) => {
    const res = await fetch(`${service.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await probe();
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function createKey(api: Api, body: Record<string, unknown>): Promise<string> {
  const res = await api("POST", "/api/gpu/keys", { endpoints: [ENDPOINT], ...body });
  if (res.status !== 200) throw new Error(`creating key ${String(body.name)} answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body.key as string;
}

/** Once the service's key directory has read the key (it polls every 250 ms): the models route answers it. */
async function untilKnown(service: ServiceProcess, secret: string): Promise<void> {
  await until("the key known to the service", 10_000, async () => {
    const res = await fetch(`${service.url}/endpoints/${ENDPOINT}/v1/models`, { headers: { authorization: `Bearer ${secret}` } });
    await res.arrayBuffer();
    return res.status === 200 ? true : undefined;
  });
}

const routeOf = (service: ServiceProcess, bearer: string): Route => ({ port: Number(new URL(service.url).port), path: `/endpoints/${ENDPOINT}/v1/chat/completions`, headers: { authorization: `Bearer ${bearer}` } });

type Caller = "static token" | "limited key";
type Run = Throughput & { cpuUs: number };

/** Part 1: the key against the static token, rounds in alternating order; returns the key's req/s. */
async function cpuPerRequest(load: Load, service: ServiceProcess, routes: Record<Caller, Route>): Promise<number> {
  const order: Caller[] = ["static token", "limited key"];
  const cpu = () => processCpuSeconds(service.child.pid!);
  for (const caller of order) await load.throughput(routes[caller], ONE_TOKEN, IN_FLIGHT, DURATION_S);
  const runs: Record<Caller, Run[]> = { "static token": [], "limited key": [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const caller of round % 2 === 0 ? order : [...order].reverse()) {
      const before = cpu();
      const run = await load.throughput(routes[caller], ONE_TOKEN, IN_FLIGHT, DURATION_S);
      runs[caller].push({ ...run, cpuUs: ((cpu() - before) / Math.max(1, run.total)) * 1e6 });
    }
  }
  const mean = (caller: Caller, pick: (r: Run) => number) => runs[caller].reduce((sum, r) => sum + pick(r), 0) / runs[caller].length;
  console.log(`\n1. CPU per request: one-token chat completions, ${IN_FLIGHT} in flight, ${ROUNDS} rounds of ${DURATION_S} s each (alternating order) after a warm-up of each\n`);
  printTable([
    ["", ...order],
    ["req/s", ...order.map((c) => fmt(mean(c, (r) => r.rps)))],
    ["p50 / p99 ms", ...order.map((c) => `${fmt(mean(c, (r) => r.p50))} / ${fmt(mean(c, (r) => r.p99))}`)],
    ["CPU per request us, the service process", ...order.map((c) => fmt(mean(c, (r) => r.cpuUs)))],
    ["  each round", ...order.map((c) => runs[c].map((r) => fmt(r.cpuUs)).join(" "))],
    ["errors", ...order.map((c) => String(runs[c].reduce((sum, r) => sum + r.errors, 0)))],
  ]);
  const ratio = mean("limited key", (r) => r.cpuUs) / mean("static token", (r) => r.cpuUs);
  console.log(`target: CPU per request with a limited key <= 1.10x a static token's: ${ratio.toFixed(3)}x ${ratio <= 1.1 ? "met" : "MISSED"}`);
  return mean("limited key", (r) => r.rps);
}

/** Part 2: statements a second idle, then at RATE req/s with the static token and with the key. */
async function statementsPerSecond(load: Load, counter: StatementCounter, service: ServiceProcess, routes: Record<Caller, Route>): Promise<void> {
  const windows: Array<[label: string, perSecond: StatementCounts, rps: number, cpuUs: number]> = [];
  const measure = async (label: string, work: () => Promise<number>) => {
    const before = counter.counts();
    const cpuBefore = processCpuSeconds(service.child.pid!);
    const started = Date.now();
    const requests = await work();
    const after = counter.counts();
    const cpu = processCpuSeconds(service.child.pid!) - cpuBefore;
    const seconds = (Date.now() - started) / 1000;
    windows.push([label, Object.fromEntries(Object.keys(after).map((k) => [k, (after[k]! - (before[k] ?? 0)) / seconds])), requests / seconds, requests > 0 ? (cpu / requests) * 1e6 : 0]);
  };
  await measure("idle", async () => (await new Promise((resolve) => setTimeout(resolve, STATEMENTS_S * 1000)), 0));
  for (const caller of ["static token", "limited key"] as const) {
    await measure(`${RATE} req/s, ${caller}`, async () => {
      const run = await load.throughput(routes[caller], ONE_TOKEN, IN_FLIGHT, STATEMENTS_S, RATE);
      if (run.errors > 0) console.log(`warning: ${run.errors} errors at ${RATE} req/s with the ${caller}`);
      return run.total;
    });
  }
  const kinds = [...new Set(windows.flatMap(([, c]) => Object.keys(c)))].sort((a, b) => (a === "other" ? 1 : b === "other" ? -1 : a.localeCompare(b)));
  console.log(`\n2. PostgreSQL statements a second sent by the service (simple queries and Executes, begin/commit included), ${STATEMENTS_S} s each\n`);
  printTable([
    ["", ...windows.map(([label]) => label)],
    ["requests a second answered", ...windows.map(([, , rps]) => fmt(rps))],
    ["CPU per request us, the service process", ...windows.map(([, , rps, cpuUs]) => (rps > 0 ? fmt(cpuUs) : ""))],
    ...kinds.map((kind) => [kind, ...windows.map(([, c]) => fmt(c[kind] ?? 0))]),
    ["all statements", ...windows.map(([, c]) => fmt(Object.values(c).reduce((a, b) => a + b, 0)))],
  ]);
  const total = (i: number) => Object.values(windows[i]![1]).reduce((a, b) => a + b, 0);
  const renewals = windows[2]![1]["lease renewal (gpu_key_lease_renew)"] ?? 0;
  console.log(`at the same rate, CPU per request with the limited key: ${(windows[2]![3] / windows[1]![3]).toFixed(3)}x the static token's`);
  console.log(`the key at ${RATE} req/s adds ${fmt(total(2) - total(1))} statements a second over the static token (lease renewals: ${fmt(renewals)} a second; target: at most 2 per key and process) ${renewals <= 2 ? "met" : "MISSED"}`);
}

interface Limits {
  tpm: number;
  budgetMicros: number;
  /** The limit sized to bind; the other is set too, with room to spare. */
  binding: "tpm_limit" | "max_budget";
}

/** Part 3, one phase: two processes, 32 callers each, one key with tpm_limit and max_budget; returns the answers a second admitted until the first refusal. */
async function limitsAcrossProcesses(services: ServiceProcess[], name: string, limits: Limits): Promise<number> {
  const api = apiOf(services[0]!);
  const secret = await createKey(api, { name, tpm_limit: limits.tpm, max_budget: limits.budgetMicros / 1e6, budget_duration: "1d" });
  for (const service of services) await untilKnown(service, secret);
  const startedAt = Date.now();
  const sides = await Promise.all(services.map((service) => runCallers(routeOf(service, secret), ONE_TOKEN, CALLERS / services.length, startedAt, LIMIT_S * 1000)));
  // The service's own figures: each process writes its usage minutes about once a second.
  await new Promise((resolve) => setTimeout(resolve, 2500));
  const key = (await api("GET", `/api/gpu/keys/${name}`)).body as { period?: { spend?: number; prompt_tokens?: string; completion_tokens?: string; requests?: string } };

  const minutes = Math.ceil(LIMIT_S / 60);
  const tokens = (f: CallerFigures, from = 0, to = Infinity) => f.answered.filter((a) => a.at >= from && a.at < to).reduce((n, a) => n + a.promptTokens + a.completionTokens, 0);
  const micros = (f: CallerFigures) => f.answered.reduce((n, a) => n + a.promptTokens * PRICE.input_per_mtok + a.completionTokens * PRICE.output_per_mtok, 0);
  const all: CallerFigures = { answered: sides.flatMap((s) => s.answered).sort((a, b) => a.at - b.at), refused: {}, errors: sides.reduce((n, s) => n + s.errors, 0) };
  for (const side of sides) for (const [code, n] of Object.entries(side.refused)) all.refused[code] = (all.refused[code] ?? 0) + n;
  const firstRefusals = sides.map((s) => s.firstRefusalAt).filter((at) => at !== undefined);
  if (firstRefusals.length > 0) all.firstRefusalAt = Math.min(...firstRefusals);
  /** The most tokens whose answers started within any 60 s. */
  const fullest = (f: CallerFigures) => {
    let most = 0;
    let from = 0;
    let sum = 0;
    for (const a of f.answered) {
      sum += a.promptTokens + a.completionTokens;
      while (f.answered[from]!.at <= a.at - 60_000) sum -= f.answered[from]!.promptTokens + f.answered[from++]!.completionTokens;
      most = Math.max(most, sum);
    }
    return most;
  };
  const columns: Array<[string, CallerFigures]> = [...sides.map((s, i) => [`process ${String.fromCharCode(65 + i)}`, s] as [string, CallerFigures]), ["total", all]];
  const pct = (part: number, whole: number) => `${((part / whole) * 100).toFixed(1)}%`;
  console.log(
    `\n3${limits.binding === "tpm_limit" ? "a" : "b"}. ${limits.binding} binding: key '${name}', tpm_limit ${limits.tpm} and max_budget $${(limits.budgetMicros / 1e6).toFixed(6)} (budget_duration 1d; token_price $${PRICE.input_per_mtok} / $${PRICE.output_per_mtok} per million prompt / completion tokens), ${CALLERS} callers (${CALLERS / services.length} on each of ${services.length} service processes) for ${LIMIT_S} s; the replica counts 21 + 1 tokens an answer\n`,
  );
  printTable([
    ["", ...columns.map(([label]) => label)],
    ["answers", ...columns.map(([, f]) => String(f.answered.length))],
    ...Array.from({ length: minutes }, (_, m) => [`tokens admitted in minute ${m + 1} (${m * 60}-${Math.min(LIMIT_S, (m + 1) * 60)} s)`, ...columns.map(([, f]) => String(tokens(f, m * 60_000, (m + 1) * 60_000)))]),
    ["tokens admitted in the fullest 60 s", ...columns.map(([, f]) => String(fullest(f)))],
    ["  of tpm_limit", ...columns.map(([, f]) => pct(fullest(f), limits.tpm))],
    ["dollars admitted (answers' usage at the price)", ...columns.map(([, f]) => (micros(f) / 1e6).toFixed(6))],
    ["  of max_budget", ...columns.map(([, f]) => pct(micros(f), limits.budgetMicros))],
    ...Object.keys(all.refused).sort().map((code) => [`refused ${code}`, ...columns.map(([, f]) => String(f.refused[code] ?? 0))]),
    ["first refusal at s", ...columns.map(([, f]) => (f.firstRefusalAt === undefined ? "" : (f.firstRefusalAt / 1000).toFixed(1)))],
    ["errors", ...columns.map(([, f]) => String(f.errors))],
  ]);
  for (const [label, side] of columns) if (side.lastError) console.log(`${label}: last error ${side.lastError}`);
  const period = key.period ?? {};
  console.log(`the service's own period figures for the key: spend $${Number(period.spend ?? 0).toFixed(6)} (${pct(Number(period.spend ?? 0) * 1e6, limits.budgetMicros)} of max_budget), ${period.requests ?? 0} requests (the answers and the two model-list calls that found the key known), ${period.prompt_tokens ?? 0} + ${period.completion_tokens ?? 0} tokens`);
  const used = { tpm_limit: fullest(all) / limits.tpm, max_budget: micros(all) / limits.budgetMicros };
  const over = (u: number) => (u <= 1 ? "never over" : "OVER");
  const other = limits.binding === "tpm_limit" ? "max_budget" : "tpm_limit";
  console.log(
    `targets: ${limits.binding} ${(used[limits.binding] * 100).toFixed(1)}% used: ${over(used[limits.binding])}, ${used[limits.binding] >= 0.95 ? ">= 95% met" : "< 95% MISSED"}; ${other} (not binding) ${(used[other] * 100).toFixed(1)}% used: ${over(used[other])}`,
  );
  return all.answered.filter((a) => all.firstRefusalAt === undefined || a.at < all.firstRefusalAt).length / ((all.firstRefusalAt ?? LIMIT_S * 1000) / 1000);
}

async function main(): Promise<void> {
  process.env.DATABASE_URL ??= adminDatabaseUrl();
  const db = await createTestDatabase();
  const replica = await spawnPart("sse-replica");
  const load = await startLoad();
  const market = await startRemoteMarket(replica.port);
  const counter = await startStatementCounter(db.url);
  const services: ServiceProcess[] = [];
  try {
    const env = { ...SERVICE_ENV, DATABASE_URL: counter.url, MARKETPLACE_URL: market.url };
    services.push(await spawnService(env, { fromBuild: true }));
    const service = services[0]!;
    const api = apiOf(service);
    const created = await api("POST", "/api/gpu/endpoints", { name: ENDPOINT, template_name: "budget", replicas: 1, max_cost_per_hour: 5, token_price: PRICE });
    if (created.status !== 200) throw new Error(`creating the endpoint answered ${created.status}: ${JSON.stringify(created.body)}`);
    await until("the endpoint's replica ready", 60_000, async () => ((await api("GET", `/api/gpu/endpoints/${ENDPOINT}`)).body.ready_replicas === 1 ? true : undefined));
    const secret = await createKey(api, { name: "bench-limited", rpm_limit: 1e9, tpm_limit: 1e9, max_parallel_requests: 100_000, max_budget: 1e6, budget_duration: "30d" });
    await untilKnown(service, secret);
    const routes: Record<Caller, Route> = { "static token": routeOf(service, TOKEN), "limited key": routeOf(service, secret) };
    console.log(`the built service (1 process; MARKETPLACE=remote, its one replica answering at once in a process of its own); load average at the start ${loadavg().map((l) => l.toFixed(1)).join(" ")}`);

    const keyRps = await cpuPerRequest(load, service, routes);
    await statementsPerSecond(load, counter, service, routes);
    if (process.env.BENCH_ONLY === "one-process") return;

    services.push(await spawnService(env, { fromBuild: true }));
    await until("the second process routing to the replica", 30_000, async () => {
      const res = await fetch(`${services[1]!.url}/endpoints/${ENDPOINT}/v1/models`, { headers: { authorization: `Bearer ${TOKEN}` } });
      await res.arrayBuffer();
      return res.status === 200 ? true : undefined;
    });
    // 3a: tpm_limit binds about halfway through the first minute at part 1's rate; the budget could pay twice the run's tokens.
    const tpm = Number(process.env.BENCH_KEYS_TPM ?? Math.max(1000, Math.round((keyRps * ANSWER_TOKENS * Math.min(60, LIMIT_S)) / 2)));
    const answersPerS = await limitsAcrossProcesses(services, "bench-tpm", { tpm, budgetMicros: 2 * Math.ceil(LIMIT_S / 60) * Math.ceil(tpm / ANSWER_TOKENS) * ANSWER_MICROS, binding: "tpm_limit" });
    // 3b: max_budget binds about halfway through the run at 3a's rate until its first refusal; tpm_limit could take twice a minute of that.
    const budgetAnswers = Math.max(50, Math.round((answersPerS * LIMIT_S) / 2));
    await limitsAcrossProcesses(services, "bench-budget", { tpm: 2 * Math.ceil(answersPerS * 60) * ANSWER_TOKENS, budgetMicros: budgetAnswers * ANSWER_MICROS, binding: "max_budget" });
  } finally {
    await Promise.all(services.map((s) => s.stop("SIGTERM")));
    for (const part of [load.part, replica]) part.child.kill("SIGTERM");
    await market.close();
    await counter.close();
    await db.drop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

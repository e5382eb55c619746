// npm run bench:serve: a compressed day of load and a preemption trace on the simulated
// marketplace against three endpoints side by side (SPEC.md section 2, "Interruptible replicas
// with on-demand fallback"): `fixed` on-demand replicas sized for the peak, `ondemand` autoscaled
// on-demand, `spot` autoscaled interruptible with on-demand fallback.
//
// Each policy runs on a service of its own in this process (startTestServer: its controller, its
// directory in PostgreSQL, its proxy), on a fresh database and a simulated marketplace of its own
// (the same catalogue, with compressed clocks): each rents from the whole market, as one endpoint
// does from a real one, instead of the three competing for its cheapest machines. The same
// Poisson arrivals (seeded: BENCH_SEED) go to the three endpoints, each a streamed chat
// completion through the proxy. Money and machine-hours come from the instance records each
// service keeps (gpu_instances.endpoint), clipped to the day. BENCH_SERVE_MINUTES sets the wall
// minutes of the day (default 10). The day runs on one market, then on two (serve-markets.ts:
// the first runs dry from 10:00 to 13:00 and loses every bid at 14:00), each on fresh services;
// BENCH_SERVE_DAYS (one, two, or one,two) chooses.
import { loadavg } from "node:os";
import { createElasticsearchClient } from "../../src/elasticsearch-client.js";
import { createTestDatabase } from "../../test/support/postgres.js";
import { startTestServer } from "../../test/support/server.js";
import { clock, DAY_S, expectedArrivals, poissonArrivals, PROFILE_TEXT, quantile, rateShare } from "./parts/serve-day.js";
import { mulberry32 } from "../shared/random.js";
import { callerAgent, newTally, streamOnce, type FailureBeforeAnswer, type Tally } from "./parts/serve-load.js";
import { continuationsOf, eventsByHour, heldOf, machinesOf, moneyOf, TIMELINE_KINDS, type DayWindow, type Money } from "./parts/serve-report.js";
import { ANSWER_TOKENS, BID_MARGIN, setupFor, STREAM_SIM_S, TOKENS } from "./parts/serve-setup.js";
import {
  backToFullStrength,
  daysOf,
  DRY_SPELL_MARKET,
  eventsOf,
  machinesPerMarket,
  marketsFor,
  recoveryText,
  type MarketDay,
  type PolicyMarkets,
  type StrengthSample,
} from "./parts/serve-markets.js";
import { oracleCost, oracleOffers, type OracleCost } from "./parts/serve-oracle.js";
import { findTemplate } from "../../src/gpu/creation/templates.js";
import { adminDatabaseUrl, printTable, wholeNumber } from "../shared/support.js";

const POLICIES = ["fixed", "ondemand", "spot"] as const;
type Policy = (typeof POLICIES)[number];
/** Per endpoint, $/h: well above what its most replicas cost, so that the budget never holds a launch back. */
const BUDGET_PER_HOUR = 10;
const TARGETS: Partial<Record<Policy, number>> = { spot: 0.35, ondemand: 0.6 };

async function main(): Promise<void> {
  const minutes = Number(process.env.BENCH_SERVE_MINUTES ?? 10);
  if (!(minutes > 0)) throw new Error(`BENCH_SERVE_MINUTES must be a number > 0, got '${process.env.BENCH_SERVE_MINUTES}'`);
  const seed = wholeNumber(process.env.BENCH_SEED ?? "1", "BENCH_SEED");
  const days = daysOf(process.env.BENCH_SERVE_DAYS);
  const setup = setupFor(minutes, seed);
  const arrivals = poissonArrivals(setup.peakPerS, mulberry32(seed));
  console.log(`bench:serve, seed ${seed}`);
  for (const line of setup.describe) console.log(line);
  console.log(`the day's load:\n${PROFILE_TEXT}`);
  console.log(`${arrivals.length} arrivals (Poisson; ${expectedArrivals(setup.peakPerS).toFixed(0)} expected), each sent to every endpoint`);
  console.log(`days: ${days.map((d) => `${d.name} (${d.describe})`).join("; ")}\n`);

  process.env.DATABASE_URL ??= adminDatabaseUrl();
  const summaries: DaySummary[] = [];
  // Each day draws its cold starts and preemptions afresh from the seed: a day run alone is the same day.
  for (const day of days) summaries.push(await runDay(setupFor(minutes, seed), arrivals, day));
  printSummaries(summaries);
}

/** What a day's side-by-side table shows of each policy. */
interface DaySummary {
  day: MarketDay;
  run: Policy[];
  money: Map<Policy, Money>;
  tallies: Map<Policy, Tally>;
  held: Map<Policy, number>;
  recoveries: Map<Policy, string[]>;
  perMarket: Map<Policy, string>;
  oracle: OracleCost;
}

async function runDay(setup: ReturnType<typeof setupFor>, arrivals: readonly number[], marketDay: MarketDay): Promise<DaySummary> {
  console.log(`\n=== the day on ${marketDay.name}: ${marketDay.describe}`);
  const services = new Map<Policy, Service>();
  for (const policy of POLICIES) services.set(policy, await startService(setup, marketDay));
  const created: Policy[] = [];
  try {
    const base = { template_name: "budget", max_cost_per_hour: BUDGET_PER_HOUR };
    const capacity = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: BID_MARGIN };
    const requests: Record<Policy, Record<string, unknown>> = {
      fixed: { ...base, name: "fixed", replicas: setup.fixedReplicas },
      ondemand: { ...base, name: "ondemand", autoscale: setup.autoscale },
      spot: { ...base, name: "spot", autoscale: setup.autoscale, capacity },
    };
    const notRun = new Map<Policy, string>();
    for (const policy of POLICIES) {
      const { api } = services.get(policy)!;
      const answer = await api("POST", "/api/gpu/endpoints", requests[policy]);
      if (answer.status !== 200) {
        notRun.set(policy, `the service answered ${answer.status}: ${JSON.stringify(answer.body)}`);
        continue;
      }
      created.push(policy);
      if (requests[policy].autoscale !== undefined) await simulateScaleDown(services.get(policy)!, policy, setup.scaleDownAfterS);
      // A service that ignored `capacity` would serve on-demand under the spot name: not that policy.
      const shown = answer.body.capacity as { interruptible?: boolean } | undefined;
      if (policy === "spot" && shown?.interruptible !== true) {
        notRun.set(policy, `the service created it without interruptible capacity (capacity in its answer: ${JSON.stringify(shown ?? null)})`);
        await api("DELETE", "/api/gpu/endpoints/spot");
        created.pop();
      }
    }
    for (const [policy, why] of notRun) console.log(`policy '${policy}' could not be created, and is left out: ${why}`);
    const run = created.filter((p) => !notRun.has(p));
    if (!run.includes("fixed")) throw new Error("the fixed policy could not be created: nothing to compare with");

    // The fixed policy was running before the day began: its replicas are ready at 00:00.
    const warmDeadline = Date.now() + 120_000;
    for (;;) {
      const fixed = (await services.get("fixed")!.api("GET", "/api/gpu/endpoints/fixed")).body as { state: string; ready_replicas: number };
      if (fixed.state === "ready") break;
      if (Date.now() > warmDeadline) throw new Error(`the fixed endpoint never became ready: ${JSON.stringify(fixed)}`);
      await sleep(200);
    }

    const oracle = await oracleOf(setup, arrivals, marketDay);
    const day = await replayDay(setup, arrivals, run, services, marketDay);
    const window: DayWindow = { startMs: day.startMs, endMs: day.endMs, factor: setup.factor };
    const money = new Map<Policy, Money>();
    const held = new Map<Policy, number>();
    const continued = new Map<Policy, ReturnType<typeof continuationsOf>>();
    const preempted = new Map<Policy, Set<string>>();
    for (const policy of run) {
      const service = services.get(policy)!;
      const machines = await machinesOf(service.db.knex, policy);
      money.set(policy, moneyOf(machines, window));
      preempted.set(policy, new Set(machines.filter((r) => r.preemptedAt !== null).map((r) => r.instanceId)));
      const metrics = await (await fetch(`${service.server.url}/metrics`)).text();
      held.set(policy, heldOf(metrics, policy).count);
      continued.set(policy, continuationsOf(metrics, policy));
    }
    await report(setup, run, notRun, day, window, money, held, continued, preempted, services, oracle);
    const recoveries = new Map(run.map((p) => [p, eventsOf(marketDay).map((e) => recoveryText(backToFullStrength(day.strength.get(p)!, e.atS)))]));
    const perMarket = new Map<Policy, string>();
    for (const policy of run) perMarket.set(policy, await machinesPerMarket(services.get(policy)!.db.knex, policy));
    return { day: marketDay, run, money, tallies: day.tallies, held, recoveries, perMarket, oracle };
  } finally {
    for (const policy of created) await services.get(policy)!.api("DELETE", `/api/gpu/endpoints/${policy}`).catch(() => undefined);
    for (const service of services.values()) await service.close();
  }
}

/** The oracle's cost of the day (serve-oracle.ts), on a fresh copy of the day's markets: nothing rented from them. */
async function oracleOf(setup: ReturnType<typeof setupFor>, arrivals: readonly number[], marketDay: MarketDay): Promise<OracleCost> {
  const markets = marketsFor(marketDay, setup.market);
  try {
    const offers = await oracleOffers(markets.marketplace, findTemplate("budget")!, BID_MARGIN);
    return oracleCost({
      arrivals,
      streamS: (STREAM_SIM_S * ANSWER_TOKENS) / TOKENS,
      targetInFlight: setup.autoscale.target_in_flight,
      maxReplicas: setup.autoscale.max_replicas,
      offers,
      ...(marketDay.drySpell && { drySpell: { ...marketDay.drySpell, market: DRY_SPELL_MARKET } }),
    });
  } finally {
    await markets.close();
  }
}

/** One policy's service: its database, its marketplace, the service on them, and its REST API. */
interface Service {
  db: Awaited<ReturnType<typeof createTestDatabase>>;
  markets: PolicyMarkets;
  server: Awaited<ReturnType<typeof startTestServer>>;
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }>;
  close(): Promise<void>;
}

/**
 * Gives an autoscaled endpoint the day's scale_down_after_s, under the API's floor of 30 s: in
 * the bench's own throwaway database, whose check of that floor is dropped first (the API's
 * validation is what refuses it to callers; this database only ever serves this day).
 */
async function simulateScaleDown(service: Service, name: string, seconds: number): Promise<void> {
  const { knex } = service.db;
  await knex.raw("alter table gpu_endpoints drop constraint if exists gpu_endpoints_autoscale_check");
  await knex("gpu_endpoints").where({ name }).update({ autoscale_scale_down_after_s: seconds });
}

async function startService(setup: ReturnType<typeof setupFor>, day: MarketDay): Promise<Service> {
  const db = await createTestDatabase();
  const markets = marketsFor(day, setup.market);
  const server = await startTestServer({ knex: db.knex, elasticsearch: createElasticsearchClient("http://127.0.0.1:9"), marketplace: markets.marketplace, env: setup.env });
  return {
    db,
    markets,
    server,
    async api(method, path, body) {
      const res = await fetch(`${server.url}${path}`, { method, headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    },
    async close() {
      await server.close();
      await markets.close();
      await db.drop();
    },
  };
}

interface Day {
  startMs: number;
  endMs: number;
  tallies: Map<Policy, Tally>;
  /** The highest target (`replicas`) each endpoint showed, per simulated hour (sampled every 500 ms wall). */
  topTarget: Map<Policy, number[]>;
  /** Each endpoint's target and ready replicas, sampled every 500 ms wall. */
  strength: Map<Policy, StrengthSample[]>;
  arrivalsByHour: number[];
  lateMs: number;
  preemptedAt14: string;
}

/** Sends every arrival at its wall moment to every endpoint, runs the day's market events (dry spell, preemption at 14:00), and waits for the last answer. */
async function replayDay(
  setup: ReturnType<typeof setupFor>,
  arrivals: readonly number[],
  run: readonly Policy[],
  services: ReadonlyMap<Policy, Service>,
  marketDay: MarketDay,
): Promise<Day> {
  const tallies = new Map(run.map((p) => [p, newTally()]));
  const topTarget = new Map(run.map((p) => [p, Array.from({ length: 24 }, () => -1)]));
  const agents = new Map(run.map((p) => [p, callerAgent()]));
  const arrivalsByHour = Array.from({ length: 24 }, () => 0);
  const open = new Set<Promise<void>>();
  const strength = new Map(run.map((p) => [p, [] as StrengthSample[]]));
  const startMs = Date.now();
  for (const service of services.values()) service.markets.startDay(startMs, setup.factor);
  const endMs = startMs + (DAY_S * 1000) / setup.factor;
  const simNow = () => ((Date.now() - startMs) / 1000) * setup.factor;
  let lateMs = 0;
  let preemptedAt14 = run.includes("spot") ? "not reached" : "no interruptible policy";

  const sampler = setInterval(() => {
    const hour = Math.min(23, Math.floor(simNow() / 3_600));
    for (const policy of run) {
      void services.get(policy)!.api("GET", "/api/gpu/endpoints").then(({ body }) => {
        for (const e of (body.endpoints ?? []) as Array<{ name: Policy; replicas: number; ready_replicas?: number }>) {
          const hours = topTarget.get(e.name);
          if (hours) hours[hour] = Math.max(hours[hour]!, e.replicas);
          strength.get(e.name)?.push({ simS: simNow(), target: e.replicas, ready: e.ready_replicas ?? 0 });
        }
      }, () => undefined);
    }
  }, 500);

  const preemptBids = async () => {
    const { db, markets } = services.get("spot")!;
    const live = (await db.knex("gpu_instances")
      .where({ endpoint: "spot", interruptible: true })
      .whereNull("destroyed_at")
      .whereNull("preempted_at")
      .whereNotNull("market_instance_id")
      .select("instance_id", "market_instance_id")) as Array<{ instance_id: string; market_instance_id: string }>;
    const chosen = live.slice(0, Math.ceil(live.length * marketDay.preemptShare));
    const results = await Promise.allSettled(chosen.map((r) => markets.bidMarket.preempt(markets.ownId(r.market_instance_id))));
    const done = chosen.filter((_, i) => results[i]!.status === "fulfilled").map((r) => r.instance_id);
    preemptedAt14 = `${done.length} of ${live.length} interruptible machines preempted at once (${done.join(", ") || "none"})`;
  };
  const preemptTimer = run.includes("spot") ? setTimeout(() => void preemptBids(), (marketDay.preemptAtS * 1000) / setup.factor) : undefined;

  await new Promise<void>((resolve) => {
    let next = 0;
    const tick = () => {
      const now = simNow();
      for (; next < arrivals.length && arrivals[next]! <= now; next++) {
        const at = arrivals[next]!;
        lateMs = Math.max(lateMs, ((now - at) * 1000) / setup.factor);
        const hour = Math.floor(at / 3_600);
        arrivalsByHour[hour]! += 1;
        for (const policy of run) {
          const p = streamOnce(agents.get(policy)!, services.get(policy)!.server.port, policy, ANSWER_TOKENS, tallies.get(policy)!, at);
          open.add(p);
          void p.then(() => open.delete(p));
        }
      }
      if (next >= arrivals.length && Date.now() >= endMs) return resolve();
      setTimeout(tick, 5);
    };
    tick();
  });
  clearTimeout(preemptTimer);
  await Promise.all(open);
  clearInterval(sampler);
  for (const agent of agents.values()) agent.destroy();
  return { startMs, endMs, tallies, topTarget, strength, arrivalsByHour, lateMs, preemptedAt14 };
}

async function report(
  setup: ReturnType<typeof setupFor>,
  run: readonly Policy[],
  notRun: ReadonlyMap<Policy, string>,
  day: Day,
  window: DayWindow,
  money: ReadonlyMap<Policy, Money>,
  held: ReadonlyMap<Policy, number>,
  continued: ReadonlyMap<Policy, ReturnType<typeof continuationsOf>>,
  preempted: ReadonlyMap<Policy, ReadonlySet<string>>,
  services: ReadonlyMap<Policy, Service>,
  oracle: OracleCost,
): Promise<void> {
  const fixed = money.get("fixed")!;
  const sim = (ms: number) => ((ms / 1000) * setup.factor).toFixed(1);
  const col = (f: (p: Policy) => string) => run.map(f);
  const m = (p: Policy) => money.get(p)!;
  const t = (p: Policy) => day.tallies.get(p)!;
  const waits = (p: Policy) => [...t(p).firstByteMs].sort((a, b) => a - b);
  const share = (p: Policy) => m(p).dollars / fixed.dollars;
  // Failed requests by when: before any answer byte (the proxy's to prevent), or a stream cut
  // mid-answer, on a machine that was preempted (its model server killed) or on another.
  const cutByPreemption = (p: Policy) => t(p).cutOn.filter((id) => preempted.get(p)!.has(id)).length;
  const beforeAnswer = (p: Policy) => t(p).failed - t(p).cutOn.length;
  console.log(`\nthe day: arrivals sent up to ${day.lateMs.toFixed(0)} ms (wall) after their moment; 14:00: ${day.preemptedAt14}`);
  console.log(`load average at the end ${loadavg().map((l) => l.toFixed(1)).join(" ")}\n`);
  printTable([
    ["", ...run],
    ["machine-hours (simulated)", ...col((p) => m(p).machineHours.toFixed(1))],
    ["dollars, as billed", ...col((p) => m(p).dollars.toFixed(2))],
    ["dollars per machine-hour", ...col((p) => (m(p).dollars / m(p).machineHours).toFixed(3))],
    ["machines rented (interruptible)", ...col((p) => `${m(p).machines} (${m(p).interruptibleMachines})`)],
    ["most machines at once", ...col((p) => String(m(p).mostAtOnce))],
    ["most replicas targeted", ...col((p) => String(Math.max(...day.topTarget.get(p)!)))],
    ["requests answered", ...col((p) => String(t(p).answered))],
    ["requests failed", ...col((p) => String(t(p).failed) + (t(p).failed ? ` (${[...t(p).failures].map(([k, v]) => `${k}: ${v}`).join(", ")})` : ""))],
    ["  failed before the answer started", ...col((p) => String(beforeAnswer(p)))],
    ["  streams cut by their machine's preemption", ...col((p) => String(cutByPreemption(p)))],
    ["  streams cut otherwise", ...col((p) => String(t(p).cutOn.length - cutByPreemption(p)))],
    ["requests held (gpu_endpoint_hold_seconds)", ...col((p) => String(held.get(p) ?? 0))],
    ["streams continued on another replica", ...col((p) => String(continued.get(p)?.resumed ?? 0))],
    ["  time to continue p50 / p99, simulated s", ...col((p) => resumeTimes(continued.get(p), (s) => ((s * setup.factor) as number).toFixed(1)))],
    ["  the same in wall ms", ...col((p) => resumeTimes(continued.get(p), (s) => (s * 1000).toFixed(0)))],
    ["streams ended with an error (not continued)", ...col((p) => cutText(continued.get(p)))],
    ["wait to first byte p50 / p99, simulated s", ...col((p) => `${sim(quantile(waits(p), 0.5))} / ${sim(quantile(waits(p), 0.99))}`)],
    ["  the same in wall ms", ...col((p) => `${quantile(waits(p), 0.5).toFixed(0)} / ${quantile(waits(p), 0.99).toFixed(0)}`)],
    ["machine-hours / fixed's", ...col((p) => (m(p).machineHours / fixed.machineHours).toFixed(3))],
    ["dollars / fixed's", ...col((p) => share(p).toFixed(3))],
    ["dollars / the oracle's", ...col((p) => (m(p).dollars / oracle.dollars).toFixed(2))],
  ]);
  console.log(
    `\nthe oracle (the day known beforehand, a lower bound: at each moment the replicas its streams in flight need at target_in_flight ${setup.autoscale.target_in_flight}, ` +
      "each only while needed, at that minute's cheapest fitting bids, else on-demand, bids rented before a dry spell kept through it while cheaper; no cold start, no preemption): " +
      `${oracle.machineHours.toFixed(1)} machine-hours, $${oracle.dollars.toFixed(2)}, ` +
      `${(oracle.dollars / fixed.dollars).toFixed(3)} of fixed's`,
  );

  const autoscaled = run.filter((p) => p !== "fixed");
  const topOf = (p: Policy) => Math.max(...day.topTarget.get(p)!);
  const reached = Math.max(0, ...autoscaled.map(topOf));
  console.log(
    `\nfixed, sized up front for the bursts: ${setup.fixedReplicas} replicas; the autoscaled policies targeted at most ${reached} (${autoscaled.map((p) => `${p} ${topOf(p)}`).join(", ")}; max_replicas ${setup.autoscale.max_replicas}): ${reached <= setup.fixedReplicas ? "within" : "ABOVE"} the fixed count`,
  );
  console.log("targets:");
  for (const [policy, limit] of Object.entries(TARGETS) as Array<[Policy, number]>) {
    if (!run.includes(policy)) console.log(`  ${policy} dollars <= ${limit} x fixed: not run (${notRun.get(policy) ?? "left out"})`);
    else console.log(`  ${policy} dollars <= ${limit} x fixed: ${share(policy).toFixed(3)} ${share(policy) <= limit ? "met" : "MISSED"}`);
  }
  for (const policy of run) {
    const cut = t(policy).cutOn.length;
    const why = t(policy).failed === 0 ? "" : ` (${beforeAnswer(policy)} before the answer started, ${cutByPreemption(policy)} streams cut by a preemption, ${cut - cutByPreemption(policy)} cut otherwise)`;
    console.log(`  ${policy} 0 failed requests: ${t(policy).failed} ${t(policy).failed === 0 ? "met" : "MISSED"}${why}`);
  }

  for (const policy of autoscaled) {
    const events = await eventsByHour(services.get(policy)!.db.knex, policy, window);
    const kinds = TIMELINE_KINDS.filter((k) => events.has(k));
    console.log(`\n${policy}, per simulated hour: arrivals, machines billed (mean), highest target, events${kinds.length ? "" : " (none)"}, failed`);
    printTable([
      ["hour", "load", "arrivals", "machines", "target", ...kinds, "failed"],
      ...Array.from({ length: 24 }, (_, h) => [
        clock(h * 3_600),
        `${Math.round(rateShare(h * 3_600 + 1_800) * 100)}%`,
        String(day.arrivalsByHour[h]),
        m(policy).byHour[h]!.toFixed(1),
        day.topTarget.get(policy)![h]! < 0 ? "-" : String(day.topTarget.get(policy)![h]),
        ...kinds.map((k) => String(events.get(k)![h] || "")),
        String(t(policy).failedByHour[h] || ""),
      ]),
    ]);
  }
  console.log(`\nfixed: machines billed per hour ${fixed.byHour.map((x) => x.toFixed(1)).join(" ")}`);
  for (const policy of run) {
    const failures = t(policy).beforeAnswer;
    if (failures.length === 0) continue;
    console.log(`\n${policy}, requests failed before the answer started:`);
    for (const f of failures) console.log(`  ${failureText(f, day.strength.get(policy)!)}`);
  }
}

/** One request failed before its answer: when, what, after how long, on which connection, and the endpoint's replicas then. */
function failureText(f: FailureBeforeAnswer, strength: readonly StrengthSample[]): string {
  const then = strength.filter((s) => s.simS <= f.atS).at(-1);
  const connection = f.reused ? `a kept-alive connection idle ${f.idleMs?.toFixed(0) ?? "?"} ms` : "a new connection";
  return [
    `${clock(f.atS)} (${f.atS.toFixed(0)} simulated s): ${f.what}${f.message ? ` '${f.message}'` : ""}`,
    `${f.afterMs.toFixed(1)} ms wall after it was sent, on ${connection} (local port ${f.localPort ?? "?"})`,
    then ? `replicas then: target ${then.target}, ready ${then.ready}` : "no replicas sampled before it",
    ...(f.listenQueue ? [`the service's port then: ${f.listenQueue}`] : []),
  ].join("; ");
}

/** The days side by side: per policy and day, what it cost, what its callers saw, and how fast it was whole again after each event. */
function printSummaries(summaries: readonly DaySummary[]): void {
  const columns = summaries.flatMap((s) => s.run.map((policy) => ({ s, policy })));
  const cell = (f: (s: DaySummary, p: Policy) => string) => columns.map(({ s, policy }) => f(s, policy));
  const fixedDollars = (s: DaySummary) => s.money.get("fixed")!.dollars;
  // Both days' events in the order of the day, each once.
  const events = summaries.flatMap((s) => eventsOf(s.day)).sort((a, b) => a.atS - b.atS);
  const eventNames = [...new Set(events.map((e) => e.name))];
  console.log(`\nthe days side by side (${summaries.map((s) => `${s.day.name}: ${s.day.describe}`).join("; ")})`);
  printTable([
    ["", ...cell((s, p) => `${p}, ${s.day.name}`)],
    ["machine-hours (simulated)", ...cell((s, p) => s.money.get(p)!.machineHours.toFixed(1))],
    ["dollars, as billed", ...cell((s, p) => s.money.get(p)!.dollars.toFixed(2))],
    ["dollars / fixed's (same day)", ...cell((s, p) => (s.money.get(p)!.dollars / fixedDollars(s)).toFixed(3))],
    ["dollars / the oracle's (same day)", ...cell((s, p) => (s.money.get(p)!.dollars / s.oracle.dollars).toFixed(2))],
    ["machines rented, per market", ...cell((s, p) => s.perMarket.get(p)!)],
    ["requests answered", ...cell((s, p) => String(s.tallies.get(p)!.answered))],
    ["requests failed", ...cell((s, p) => String(s.tallies.get(p)!.failed))],
    ["requests held", ...cell((s, p) => String(s.held.get(p) ?? 0))],
    ...eventNames.map((name) => [
      `back to full strength after ${name}`,
      ...cell((s, p) => {
        const i = eventsOf(s.day).findIndex((e) => e.name === name);
        return i < 0 ? "(no such event that day)" : s.recoveries.get(p)![i]!;
      }),
    ]),
  ]);
  console.log(`the oracle's dollars: ${summaries.map((s) => `${s.day.name} $${s.oracle.dollars.toFixed(2)} (${(s.oracle.dollars / fixedDollars(s)).toFixed(3)} of fixed's)`).join(", ")}`);
  console.log("full strength: ready replicas >= the endpoint's target, sampled every 500 ms wall; the time is from the event to the end of the first shortfall that began within a simulated hour of it");
}

function resumeTimes(c: ReturnType<typeof continuationsOf> | undefined, show: (seconds: number) => string): string {
  return c === undefined || c.resumed === 0 ? "-" : `${show(c.p50)} / ${show(c.p99)}`;
}

function cutText(c: ReturnType<typeof continuationsOf> | undefined): string {
  const total = [...(c?.cut.values() ?? [])].reduce((a, b) => a + b, 0);
  return total === 0 ? "0" : `${total} (${[...c!.cut].map(([reason, n]) => `${reason}: ${n}`).join(", ")})`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});

import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import pino from "pino";
import { DEFAULT_READ_TIMEOUT_MS } from "../../../src/db/read-timeout.js";
import { EndpointStore } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { LoadStore } from "../../../src/gpu/endpoints/load/load-store.js";
import { KnexTrafficStore } from "../../../src/gpu/endpoints/load/traffic-store.js";
import { createHistorySampler } from "../../../src/gpu/history/history-sampler.js";
import { KnexHistoryStore } from "../../../src/gpu/history/history-store.js";
import { InstanceStore } from "../../../src/gpu/store/instance-store.js";
import { KnexKeyUsageStore } from "../../../src/server/keys/key-usage-store.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

// Each key's machine cost on the real PostgreSQL (SPEC.md section 2, "Keys for callers", "Dollars,
// two ways"): a minute's billed machine dollars of an endpoint, from its instance records, split
// over the keys by their share of that minute's tokens, in integer micro-dollars that add up to
// the minute's dollars; minutes with no tokens unattributed.

const MINUTE = 60_000;
let db: TestDatabase;
let store: KnexKeyUsageStore;
/** The start of an hour one to two hours ago: no live machine's "now" falls in its minutes. */
const base = Math.floor((Date.now() - 3_600_000) / 3_600_000) * 3_600_000;
const minute = (n: number) => new Date(base + n * MINUTE);

beforeAll(async () => {
  db = await createTestDatabase();
  store = KnexKeyUsageStore.create({ knex: db.knex });
});

afterAll(async () => {
  await db?.drop();
});

beforeEach(async () => {
  await db.knex("gpu_key_usage_minutes").delete();
  await db.knex("gpu_instances").delete();
});

let nextInstance = 1;
async function machine(endpoint: string, ratePerHour: number, from: Date, to: Date | null): Promise<void> {
  const id = `gpu-${nextInstance++}`;
  await db.knex("gpu_instances").insert({
    instance_id: id,
    offer_id: `offer-${id}`,
    status: to === null ? "running" : "destroyed",
    cost_per_hour: ratePerHour,
    endpoint,
    created_at: from,
    updated_at: from,
    destroyed_at: to,
  });
}

async function usage(key: string, endpoint: string, at: Date, promptTokens: number, completionTokens: number, processId = "p1", refused = {}): Promise<void> {
  await db.knex("gpu_key_usage_minutes").insert({
    key_name: key,
    endpoint_name: endpoint,
    minute: at,
    process_id: processId,
    requests: 1,
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    refused: JSON.stringify(refused),
  });
}

async function machineCost(key: string): Promise<Array<[number, number]>> {
  await store.attributeMachineCost(minute(0), minute(60));
  const points = await store.points({ keyName: key, from: minute(0), step: "minute" });
  return points.map((p) => [(p.at.getTime() - base) / MINUTE, p.machineCostMicros]);
}

describe("a key's machine cost", () => {
  it("splits a minute's machine dollars between two keys by their tokens, 3:1 exactly", async () => {
    // $3.60/h for the whole minute: 60,000 micro-dollars.
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 200, 100);
    await usage("team-b", "chat", minute(1), 50, 50);
    expect(await machineCost("team-a")).toEqual([[1, 45_000]]);
    expect(await machineCost("team-b")).toEqual([[1, 15_000]]);
  });

  it("counts only what the machines billed during the minute, and shares that add up to it exactly", async () => {
    // $1/h over a whole minute (16,666.67 micro-dollars: 16,667), and a $3.60/h machine from the
    // minute's 30th second (30,000): 46,667 to split 1:1:1.
    await machine("chat", 1, minute(-5), null);
    await machine("chat", 3.6, new Date(minute(2).getTime() + 30_000), minute(3));
    await machine("other", 100, minute(0), null);
    // A record that ends before it starts bills nothing.
    await machine("chat", 50, new Date(minute(2).getTime() + 40_000), new Date(minute(2).getTime() + 20_000));
    for (const key of ["k1", "k2", "k3"]) await usage(key, "chat", minute(2), 1, 0);
    const shares = await Promise.all(["k1", "k2", "k3"].map(async (key) => (await machineCost(key))[0]![1]));
    expect(shares.reduce((a, b) => a + b)).toBe(46_667);
    for (const share of shares) expect(Math.abs(share - 46_667 / 3)).toBeLessThan(1);
  });

  it("leaves a minute with no tokens unattributed", async () => {
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 0, 0, "p1", { rpm_limit: 3 });
    await usage("team-a", "chat", minute(2), 10, 0);
    await usage("team-b", "chat", minute(2), 10, 0);
    expect(await machineCost("team-a")).toEqual([
      [1, 0],
      [2, 30_000],
    ]);
  });

  it("counts two processes' rows of one minute as that minute's tokens", async () => {
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 100, 0, "p1");
    await usage("team-a", "chat", minute(1), 50, 50, "p2");
    await usage("team-b", "chat", minute(1), 30, 20, "p2");
    expect(await machineCost("team-a")).toEqual([[1, 48_000]]);
    expect(await machineCost("team-b")).toEqual([[1, 12_000]]);
  });

  it("is summed into the hour's point and into the key's period", async () => {
    await machine("chat", 3.6, minute(-5), minute(10));
    await usage("team-a", "chat", minute(1), 3, 0);
    await usage("team-b", "chat", minute(1), 1, 0);
    await usage("team-a", "chat", minute(2), 1, 0);
    // After the machine ended: nothing billed.
    await usage("team-a", "chat", minute(11), 5, 0);
    await store.attributeMachineCost(minute(0), minute(60));
    const hours = await store.points({ keyName: "team-a", from: minute(0), step: "hour" });
    expect(hours.map((p) => p.machineCostMicros)).toEqual([45_000 + 60_000]);
    const totals = await store.periodTotals([
      { keyName: "team-a", from: minute(2) },
      { keyName: "team-b", from: minute(0) },
    ]);
    expect(totals.get("team-a")?.machineCostMicros).toBe(60_000);
    expect(totals.get("team-b")?.machineCostMicros).toBe(15_000);
  });
});

describe("the sync leader's sampler", () => {
  it("attributes each finished minute, and again when a process's rows of it come late", async () => {
    await machine("chat", 3.6, minute(-5), null);
    await usage("team-a", "chat", minute(1), 10, 0);
    await usage("team-a", "chat", minute(2), 10, 0);
    let now = minute(2).getTime() + 10_000;
    const sampler = samplerAt(() => now);
    await sampler.sampleDue();
    // Minute 1 ended: team-a alone used it; minute 2 has not ended yet.
    expect(await pointsOf("team-a")).toEqual([
      [1, 60_000],
      [2, 0],
    ]);
    // Another process's rows of minute 1 arrive late: the next minute's round splits it again.
    await usage("team-b", "chat", minute(1), 30, 0, "p2");
    now = minute(3).getTime() + 10_000;
    await sampler.sampleDue();
    expect(await pointsOf("team-a")).toEqual([
      [1, 15_000],
      [2, 60_000],
    ]);
    expect(await pointsOf("team-b")).toEqual([[1, 45_000]]);
  });
});

function samplerAt(now: () => number) {
  return createHistorySampler({
    ctx: { instances: InstanceStore.create({ knex: db.knex }) },
    endpoints: EndpointStore.create({ knex: db.knex }),
    load: LoadStore.create({ knex: db.knex }),
    traffic: KnexTrafficStore.create({ knex: db.knex }),
    history: KnexHistoryStore.create({ knex: db.knex }),
    keyUsage: store,
    historyDays: 30,
    logger: pino({ level: "silent" }),
    now,
  });
}

/** The key's minutes as stored: no attribution of its own. */
async function pointsOf(key: string): Promise<Array<[number, number]>> {
  const points = await store.points({ keyName: key, from: minute(0), step: "minute" });
  return points.map((p) => [(p.at.getTime() - base) / MINUTE, p.machineCostMicros]);
}

describe("the usage read with machine costs", () => {
  it("attributes the last minutes of 20 keys on two endpoints from two processes in one short statement, and reads 7 days of them", async () => {
    const now = Date.now();
    const weekAgo = new Date(Math.floor((now - 7 * 86_400_000) / MINUTE) * MINUTE);
    const lastMinute = new Date(Math.floor(now / MINUTE) * MINUTE - MINUTE);
    // 20 keys, 10 on each endpoint, every minute of the week from two processes: 403,200 rows.
    await db.knex.raw(
      `insert into gpu_key_usage_minutes (key_name, endpoint_name, minute, process_id, requests, prompt_tokens, completion_tokens, spend_micros)
       select 'k' || k, case when k < 10 then 'chat' else 'code' end, m, p, 2, 100 + k, 20 + (extract(epoch from m)::bigint % 7), 150
       from generate_series(0, 19) as k, generate_series(?::timestamptz, ?::timestamptz, interval '1 minute') as m, unnest(array['p1', 'p2']) as p`,
      [weekAgo, lastMinute],
    );
    // Each endpoint's replicas come and go every 6 hours (two at a time), among a year of other records.
    const replicas = Array.from({ length: 2 * 2 * 28 }, (_, i) => {
      const starts = weekAgo.getTime() + Math.floor(i / 4) * 6 * 3_600_000 + (i % 2) * 1_234_567;
      return { endpoint: i % 4 < 2 ? "chat" : "code", starts, ends: starts + 6 * 3_600_000 + 600_000 };
    });
    for (const r of replicas) await machine(r.endpoint, 2.5, new Date(r.starts), r.ends > now ? null : new Date(r.ends));
    await db.knex.raw(
      `insert into gpu_instances (instance_id, offer_id, status, cost_per_hour, created_at, updated_at, destroyed_at)
       select 'gpu-old-' || i, 'offer', 'destroyed', 1.5, now() - (i || ' hours')::interval - interval '8 days', now(), now() - (i || ' hours')::interval - interval '7 days 12 hours'
       from generate_series(1, 8760) as i`,
    );
    await db.knex.raw("analyze gpu_key_usage_minutes");
    await db.knex.raw("analyze gpu_instances");

    const timed = async <T>(work: () => Promise<T>): Promise<[T, number]> => {
      const started = performance.now();
      const result = await work();
      return [result, Math.round(performance.now() - started)];
    };
    // What the sampler does each minute: the last 10 minutes attributed again.
    const [, roundMs] = await timed(() => store.attributeMachineCost(new Date(lastMinute.getTime() - 9 * MINUTE), new Date(lastMinute.getTime() + MINUTE)));
    // Three hours attributed, as a check of the whole: the keys of an endpoint share what its
    // replicas billed, less the rounding of each minute (at most half a micro-dollar).
    const end = lastMinute.getTime() + MINUTE;
    const threeHoursAgo = new Date(end - 180 * MINUTE);
    await store.attributeMachineCost(threeHoursAgo, new Date(end));
    const [week, weekMs] = await timed(() => store.points({ keyName: "k3", from: weekAgo, step: "hour" }));
    const [periods, periodsMs] = await timed(() => store.periodTotals(Array.from({ length: 20 }, (_, k) => ({ keyName: `k${k}`, from: weekAgo }))));
    console.log(`machine cost over 403,200 usage rows: a sampler round (10 minutes, 400 rows) ${roundMs} ms; reads: one key's 7 days ${weekMs} ms, 20 keys' 7-day periods ${periodsMs} ms`);

    expect(week.length).toBeGreaterThanOrEqual(168);
    const recent = await store.periodTotals(Array.from({ length: 10 }, (_, k) => ({ keyName: `k${k}`, from: threeHoursAgo })));
    const chat = [...recent.values()].reduce((sum, t) => sum + t.machineCostMicros, 0);
    const billed = replicas
      .filter((r) => r.endpoint === "chat")
      .reduce((sum, r) => sum + (2.5 * Math.max(0, Math.min(r.ends, end) - Math.max(r.starts, threeHoursAgo.getTime()))) / 3_600_000, 0);
    expect(chat).toBeGreaterThan(0);
    expect(Math.abs(chat / 1e6 - billed)).toBeLessThan(0.001);
    expect(periods.size).toBe(20);
    expect(roundMs).toBeLessThan(DEFAULT_READ_TIMEOUT_MS);
  }, 120_000);
});

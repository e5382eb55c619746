import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_CAPACITY } from "../../../src/gpu/endpoints/resource/endpoint-capacity.js";
import { EndpointStore, type EndpointRecord } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { LoadStore } from "../../../src/gpu/endpoints/load/load-store.js";
import { KnexTrafficStore } from "../../../src/gpu/endpoints/load/traffic-store.js";
import { createHistorySampler } from "../../../src/gpu/history/history-sampler.js";
import { KnexHistoryStore, type HistorySample } from "../../../src/gpu/history/history-store.js";
import { InstanceStore } from "../../../src/gpu/store/instance-store.js";
import { createProxyTraffic } from "../../../src/server/proxy/proxy-traffic.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

// The endpoints' history on the real PostgreSQL: what two service processes publish is sampled
// once a minute by the leader, summed once however many samplers (leaders) see the minute, read
// back as points of a step, and pruned.

const MINUTE = 60_000;
let db: TestDatabase;
let endpoints: EndpointStore;
let endpoint: EndpointRecord;

beforeAll(async () => {
  db = await createTestDatabase();
  endpoints = EndpointStore.create({ knex: db.knex });
  endpoint = await endpoints.insert({ name: "chat", templateName: "budget", replicas: 2, maxCostPerHour: 5, customConfig: {}, autoscale: null, capacity: { ...DEFAULT_CAPACITY } });
});

afterAll(async () => {
  await db?.drop();
});

const traffic = () => KnexTrafficStore.create({ knex: db.knex });
const history = () => KnexHistoryStore.create({ knex: db.knex });
const samplerAt = (now: number, historyDays = 7) =>
  createHistorySampler({
    ctx: { instances: InstanceStore.create({ knex: db.knex }) },
    endpoints,
    load: LoadStore.create({ knex: db.knex }),
    traffic: traffic(),
    history: history(),
    historyDays,
    logger: pino({ level: "silent" }),
    now: () => now,
  });
const zero = { ok: 0, clientError: 0, serverError: 0, held: 0, continued: 0, cut: 0 };
const buckets = (at: Record<number, number>) => Array.from({ length: 18 }, (_, i) => at[i] ?? 0);

describe("the endpoints' history", () => {
  it("sums a minute that two processes published once, however often and by however many leaders it is sampled", async () => {
    // The minute before the current one: complete, and still within the database's "fresh" load.
    const minute = Math.floor(Date.now() / MINUTE) * MINUTE - MINUTE;
    const a = createProxyTraffic(() => minute + 10_000);
    const b = createProxyTraffic(() => minute + 20_000);
    for (let i = 0; i < 3; i++) {
      a.count("chat", "ok");
      a.firstByte("chat", 40);
    }
    b.count("chat", "ok");
    b.count("chat", "ok");
    b.count("chat", "clientError");
    b.count("chat", "held");
    b.firstByte("chat", 400);
    b.firstByte("chat", 400);
    b.count("other", "ok"); // an endpoint that does not exist: not sampled
    await traffic().publish("process-a", a.changedSince(0));
    await traffic().publish("process-a", a.changedSince(0)); // a repeated write changes nothing
    await traffic().publish("process-b", b.changedSince(0));
    const load = LoadStore.create({ knex: db.knex });
    await load.publish("process-a", [{ endpointId: endpoint.id, inFlight: 2, held: 1, byReplica: {}, byCaller: {}, lastRequestAt: new Date() }]);
    await load.publish("process-b", [{ endpointId: endpoint.id, inFlight: 1, held: 0, byReplica: {}, byCaller: {}, lastRequestAt: new Date() }]);

    const end = minute + MINUTE;
    await samplerAt(end + 5_000).sampleDue();
    await samplerAt(end + 6_000).sampleDue(); // another leader, after a takeover
    const leader = samplerAt(end + 7_000);
    await leader.sampleDue();
    await leader.sampleDue();

    const points = await history().points(endpoint.id, { from: new Date(minute - 3_600_000), to: new Date(end + 7_000), stepS: 60 });
    expect(points).toEqual([
      {
        at: new Date(end),
        load: 4,
        held: 1,
        readyReplicas: 0,
        targetReplicas: 2,
        costPerHour: 0,
        counts: { ...zero, ok: 5, clientError: 1, held: 1 },
        firstByte: buckets({ 5: 3, 8: 2 }),
      },
    ]);
    const rows = await db.knex("gpu_endpoint_history").where({ endpoint_id: endpoint.id });
    expect(rows).toHaveLength(1);
  });

  it("reads a larger step as its requests summed, histograms merged, load at its highest and replicas as at its end", async () => {
    const step = 180;
    const start = (Math.floor(Date.now() / 1000 / step) - 10) * step * 1000;
    const sample = (minute: number, load: number, ready: number, ok: number, fb: Record<number, number>): HistorySample => ({
      endpointId: endpoint.id,
      at: new Date(start + (minute + 1) * MINUTE),
      load,
      held: 0,
      readyReplicas: ready,
      targetReplicas: 3,
      costPerHour: ready * 0.25,
      counts: { ...zero, ok },
      firstByte: buckets(fb),
    });
    expect(await history().record([sample(0, 2, 1, 10, { 3: 10 }), sample(1, 7, 2, 5, { 4: 5 }), sample(2, 3, 3, 1, {}), sample(3, 1, 3, 4, { 3: 4 })])).toBe(4);
    const points = await history().points(endpoint.id, { from: new Date(start), to: new Date(start + 6 * MINUTE), stepS: step });
    expect(points.map((p) => [p.at.getTime() - start, p.load, p.readyReplicas, p.costPerHour, p.counts.ok, p.firstByte[3], p.firstByte[4]])).toEqual([
      [3 * MINUTE, 7, 3, 0.75, 16, 10, 5],
      [4 * MINUTE, 1, 3, 0.75, 4, 4, 0],
    ]);
  });

  it("prunes samples older than HISTORY_DAYS and traffic minutes already sampled", async () => {
    const now = Date.now();
    const old = { endpointId: endpoint.id, load: 0, held: 0, readyReplicas: 0, targetReplicas: 0, costPerHour: 0, counts: zero, firstByte: [] };
    await history().record([
      { ...old, at: new Date(Math.floor((now - 3 * 86_400_000) / MINUTE) * MINUTE) },
      { ...old, at: new Date(Math.floor((now - 86_400_000) / MINUTE) * MINUTE) },
    ]);
    const stale = createProxyTraffic(() => now - 3_600_000);
    stale.count("chat", "ok");
    await traffic().publish("process-a", stale.changedSince(0));

    await samplerAt(now, 2).sampleDue();

    const left = (await db.knex("gpu_endpoint_history").select("at")).map((r: { at: Date }) => now - r.at.getTime());
    expect(left.filter((age) => age > 2 * 86_400_000)).toEqual([]);
    expect(left.filter((age) => age > 86_400_000 - MINUTE)).toHaveLength(1);
    expect(await db.knex("gpu_endpoint_traffic").where("minute", "<", new Date(now - 30 * MINUTE))).toEqual([]);
  });

  // Minutes after every sample above (and after the real clock), so that nothing else fills them.
  const later = () => Math.floor(Date.now() / MINUTE) * MINUTE + 30 * MINUTE;
  const publishOk = async (processId: string, minuteStart: number, ok: number) => {
    const counts = createProxyTraffic(() => minuteStart + 10_000);
    for (let i = 0; i < ok; i++) counts.count("chat", "ok");
    await traffic().publish(processId, counts.changedSince(0));
  };
  const okByMinute = async (from: number, to: number) =>
    (await history().points(endpoint.id, { from: new Date(from), to: new Date(to), stepS: 60 })).map((p) => [p.at.getTime() - from, p.counts.ok]);

  it("samples the minutes no round sampled (a leader change, a database away) with each one's own traffic", async () => {
    const base = later();
    for (let k = 0; k < 5; k++) await publishOk("process-a", base + k * MINUTE, k + 1);

    await samplerAt(base + MINUTE + 5_000).sampleDue();
    // Four minutes with no leader; the next one samples all of them.
    await samplerAt(base + 5 * MINUTE + 5_000).sampleDue();

    expect(await okByMinute(base, base + 5 * MINUTE)).toEqual([
      [MINUTE, 1],
      [2 * MINUTE, 2],
      [3 * MINUTE, 3],
      [4 * MINUTE, 4],
      [5 * MINUTE, 5],
    ]);
  });

  it("sums again a minute a process published after it was sampled, keeping its load and replicas", async () => {
    const minute = later() + 10 * MINUTE;
    await publishOk("process-a", minute, 2);
    const leader = samplerAt(minute + MINUTE + 5_000);
    await leader.sampleDue();
    expect(await okByMinute(minute, minute + MINUTE)).toEqual([[MINUTE, 2]]);
    const [before] = await history().points(endpoint.id, { from: new Date(minute), to: new Date(minute + MINUTE), stepS: 60 });

    // A process held up (its database calls failing) publishes the minute's last requests late.
    await publishOk("process-b", minute, 3);
    await leader.sampleDue();
    expect(await okByMinute(minute, minute + MINUTE)).toEqual([[MINUTE, 5]]);

    // And a new leader, which has not read the traffic yet, sums what it finds once.
    await publishOk("process-c", minute, 1);
    await samplerAt(minute + 2 * MINUTE + 5_000).sampleDue();
    const [after] = await history().points(endpoint.id, { from: new Date(minute), to: new Date(minute + MINUTE), stepS: 60 });
    expect(after).toEqual({ ...before, counts: { ...zero, ok: 6 } });
  });
});

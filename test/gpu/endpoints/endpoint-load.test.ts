import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLoadPublisher } from "../../../src/gpu/endpoints/load/load-publisher.js";
import { LoadStore } from "../../../src/gpu/endpoints/load/load-store.js";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createProxyLoad } from "../../../src/server/proxy/proxy-load.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { waitFor } from "../../support/wait.js";
import { createEndpoint, FAST_ENDPOINT_ENV } from "./helpers.js";

// The endpoints' load across service processes (SPEC.md section 2, "Endpoints that follow their
// load"): every process publishes its proxy's counts through PostgreSQL, the reader sums the fresh
// rows. Real PostgreSQL; two publishers stand for two processes, then two whole apps on one database.

let db: TestDatabase;
const logger = pino({ level: "silent" });

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe("load store and publisher", () => {
  it("sums the fresh counts of every process, per replica too; a process that stops publishing stops counting", async () => {
    const store = LoadStore.create({ knex: db.knex, freshMs: 1_500 });
    const [a, b] = [createProxyLoad(), createProxyLoad()];
    const publishA = createLoadPublisher({ store, load: a, logger, processId: "process-a" });
    const publishB = createLoadPublisher({ store, load: b, logger, processId: "process-b" });
    a.arrived("101");
    a.sent("101", "gpu-1", 1);
    a.sent("101", "gpu-1", 1);
    a.held("101", 1);
    await publishA.publish();
    await publishB.publish(); // nothing of its own: no row
    expect(await db.knex("gpu_endpoint_load").where({ process_id: "process-b" })).toEqual([]);
    let load = (await store.readLoad(["101", "102"])).get("101")!;
    expect(load).toMatchObject({ inFlight: 2, held: 1, byReplica: new Map([["gpu-1", 2]]) });
    expect(load.lastRequestAt).toBeInstanceOf(Date);
    expect((await store.readLoad(["102"])).get("102")).toEqual({ inFlight: 0, held: 0, byReplica: new Map(), lastRequestAt: null });

    b.arrived("101");
    b.sent("101", "gpu-2", 1);
    b.sent("101", "gpu-1", 1);
    await publishB.publish();
    load = (await store.readLoad(["101"])).get("101")!;
    expect(load).toMatchObject({ inFlight: 4, held: 1, byReplica: new Map([["gpu-1", 3], ["gpu-2", 1]]) });

    // A is killed: its row is no longer updated, and its counts vanish once stale; B's stay.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await publishB.publish();
    await new Promise((resolve) => setTimeout(resolve, 700));
    load = (await store.readLoad(["101"])).get("101")!;
    expect(load).toMatchObject({ inFlight: 2, held: 0, byReplica: new Map([["gpu-1", 1], ["gpu-2", 1]]) });
    // Its last request still counts for scale to zero's clock.
    expect(load.lastRequestAt).not.toBeNull();

    // B stops gracefully: its counts are written as zero at once.
    publishB.start();
    await publishB.stop();
    expect((await store.readLoad(["101"])).get("101")).toMatchObject({ inFlight: 0, held: 0, byReplica: new Map() });
    expect(await store.prune(0)).toBe(2);
  });

  it("sums each caller's answers in flight over every process and endpoint, fresh rows only, in one read", async () => {
    const store = LoadStore.create({ knex: db.knex, freshMs: 1_500 });
    const [a, b] = [createProxyLoad(), createProxyLoad()];
    const publishA = createLoadPublisher({ store, load: a, logger, processId: "process-callers-a" });
    const publishB = createLoadPublisher({ store, load: b, logger, processId: "process-callers-b" });
    a.callerAnswer("301", "team-a", 1);
    a.callerAnswer("301", "team-a", 1);
    a.callerAnswer("302", "team-a", 1);
    a.callerAnswer("301", "AUTH_TOKENS#1", 1);
    b.callerAnswer("301", "team-a", 1);
    b.callerAnswer("302", "team-b", 1);
    await publishA.publish();
    await publishB.publish();
    expect(await store.callersInFlight(["team-a", "team-b", "team-c", "AUTH_TOKENS#1"])).toEqual(
      new Map([
        ["team-a", 4],
        ["team-b", 1],
        ["team-c", 0],
        ["AUTH_TOKENS#1", 1],
      ]),
    );
    expect(await store.callersInFlight([])).toEqual(new Map());

    // A is killed: its answers leave the sums once its rows are stale; B's stay.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    b.callerAnswer("302", "team-b", -1);
    await publishB.publish();
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(await store.callersInFlight(["team-a", "team-b", "AUTH_TOKENS#1"])).toEqual(
      new Map([
        ["team-a", 1],
        ["team-b", 0],
        ["AUTH_TOKENS#1", 0],
      ]),
    );

    // B stops gracefully: its callers' answers are written as none at once.
    publishB.start();
    await publishB.stop();
    expect((await store.callersInFlight(["team-a"])).get("team-a")).toBe(0);
    await db.knex("gpu_endpoint_load").whereIn("process_id", ["process-callers-a", "process-callers-b"]).delete();
  });

  it("publishes about every second while it has load, and the zero once the load ends, then stops writing", async () => {
    const store = LoadStore.create({ knex: db.knex });
    const load = createProxyLoad();
    const publisher = createLoadPublisher({ store, load, logger, processId: "process-c", intervalMs: 50 });
    publisher.start();
    try {
      load.arrived("201");
      load.sent("201", "gpu-9", 1);
      await waitFor(async () => (await store.readLoad(["201"])).get("201")!.inFlight === 1, "published in flight", 5_000);
      load.sent("201", "gpu-9", -1);
      await waitFor(async () => (await store.readLoad(["201"])).get("201")!.inFlight === 0, "published zero", 5_000);
      const row = () => db.knex("gpu_endpoint_load").where({ process_id: "process-c" }).first();
      // Three intervals after the last change it is no longer written.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const settled = (await row()).updated_at as Date;
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(((await row()).updated_at as Date).getTime()).toBe(settled.getTime());
    } finally {
      await publisher.stop();
    }
  });
});

describe("load across two service processes on one database", () => {
  let market: SimulatedMarketplace;
  const servers: TestServer[] = [];

  beforeAll(async () => {
    // Machines that take a minute to start: the endpoint's replica stays on its way, requests are held.
    market = createSimulatedMarketplace({ creatingMs: 60_000, loadingMs: 100, modelServerStartMs: 100 });
    for (let i = 0; i < 2; i++) {
      servers.push(await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: market, env: FAST_ENDPOINT_ENV }));
    }
  });

  afterAll(async () => {
    for (const server of servers) await server.close();
    await market?.close();
  });

  it("counts a request held at one process in the sum every process reads, and nothing once its caller leaves", async () => {
    const [a, b] = servers as [TestServer, TestServer];
    await createEndpoint(a.url, { name: "spread", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const { id } = (await db.knex("gpu_endpoints").where({ name: "spread" }).first()) as { id: string };
    const store = LoadStore.create({ knex: db.knex });
    const gone = new AbortController();
    const answer = fetch(`${b.url}/endpoints/spread/v1/chat/completions`, { method: "POST", body: "{}", signal: gone.signal });
    await waitFor(async () => (await store.readLoad([String(id)])).get(String(id))!.held === 1, "held at b, published", 10_000);
    // The other process's metrics show the sum too.
    const metric = async (url: string) => (await (await fetch(`${url}/metrics`)).text()).match(/^gpu_endpoint_held\{endpoint="spread"\} (\d+)/m)?.[1];
    expect(await metric(a.url)).toBe("1");
    expect((await (await fetch(`${a.url}/metrics`)).text()).match(/^gpu_endpoint_load\{endpoint="spread"\} (\d+)/m)?.[1]).toBe("1");

    gone.abort();
    await expect(answer).rejects.toThrow();
    await waitFor(async () => (await store.readLoad([String(id)])).get(String(id))!.held === 0, "the held request gone from the sum", 10_000);
    const rows = (await db.knex("gpu_endpoint_load").where({ endpoint_id: id })) as Array<{ held: number; in_flight: number }>;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ held: 0, in_flight: 0 });
  });
});

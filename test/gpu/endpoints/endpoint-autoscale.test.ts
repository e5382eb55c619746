import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { waitFor } from "../helpers.js";
import { createEndpoint, eventsOf, FAST_ENDPOINT_ENV, getEndpoint, liveMachines, waitForEndpoint, watchMachines, type EventJson } from "./helpers.js";

// Endpoints that follow their load, end to end on the real service: the simulated marketplace's
// model servers (each answer 12 tokens, 400 ms apart: streams of about five seconds; the wake's
// answer one token), the real proxy holding and routing, the load published through PostgreSQL,
// the controller scaling on it.

const ENV = { ...FAST_ENDPOINT_ENV, GPU_ENDPOINT_HOLD_MS: "5000", GPU_ENDPOINT_HOLD_MAX: "4" };
const AUTOSCALE = { min_replicas: 0, max_replicas: 3, target_in_flight: 3, scale_up_after_s: 1, scale_down_after_s: 30 };

let db: TestDatabase;
let server: TestServer;
let standby: TestServer;
let market: SimulatedMarketplace;

beforeAll(async () => {
  db = await createTestDatabase();
  market = createSimulatedMarketplace({ creatingMs: 100, loadingMs: 100, modelServerStartMs: 100, tokenDelayMs: 400 });
  server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: market, env: ENV });
  // A second service process on the same database: the first leads, this one only proxies.
  standby = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: market, env: ENV });
});

afterAll(async () => {
  await standby?.close();
  await server?.close();
  await market?.close();
  await db?.drop();
});

interface Answer {
  status: number;
  retryAfter: string | null;
  /** The whole streamed answer ended with [DONE]. */
  complete: boolean;
  at: number;
}

/** A streamed chat completion of `maxTokens` tokens through the proxy of `via`, read to its end. */
async function stream(via: TestServer, name: string, maxTokens = 12): Promise<Answer> {
  const res = await fetch(`${via.url}/endpoints/${name}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: maxTokens, stream: true }),
  });
  const text = await res.text();
  return { status: res.status, retryAfter: res.headers.get("retry-after"), complete: text.endsWith("data: [DONE]\n\n"), at: Date.now() };
}

const kinds = (events: EventJson[]) => events.map((e) => e.kind);
const scaledTo = (events: EventJson[], to: number) => events.find((e) => e.kind === "scaled" && e.actor === "system" && e.detail.includes(`-> ${to}:`));

describe("endpoints that follow their load", () => {
  it("wakes from idle on one request, scales 1 -> 3 under 8 streams, and drains back to zero with no stream cut", async () => {
    const created = await createEndpoint(server.url, { name: "follows", template_name: "budget", max_cost_per_hour: 5, autoscale: AUTOSCALE });
    expect(created).toMatchObject({ state: "idle", replicas: 0 });
    expect(await liveMachines(db.knex, "follows")).toEqual([]);
    const watch = watchMachines(db.knex, "follows");

    // One request wakes it: held through the cold start, then answered, never a 503 (one token: its
    // answer comes at once, no 400 ms between tokens).
    const first = await stream(server, "follows", 1);
    expect(first).toMatchObject({ status: 200, complete: true });
    expect(kinds(await eventsOf(server.url, "follows"))).toEqual(expect.arrayContaining(["woke", "launched", "ready"]));

    // Eight streams at once on one replica: the load (8 over 3 per replica) wants 3.
    const started = Date.now();
    const streams = await Promise.all(Array.from({ length: 8 }, () => stream(server, "follows")));
    expect(streams.every((s) => s.status === 200 && s.complete)).toBe(true);
    const scaled = await eventsOf(server.url, "follows");
    const up = scaledTo(scaled, 3);
    // 1 -> 3 at once; or through 2 when a busy machine's load was read while the streams still arrived.
    expect(up?.detail).toMatch(/^replicas [12] -> 3: load \d+ \(\d+ in flight, \d+ held\), 3 per replica: wanted above [12] for \d+ s$/);
    if (up!.detail.startsWith("replicas 2")) expect(scaledTo(scaled, 2)?.detail).toMatch(/^replicas 1 -> 2: load \d+ \(\d+ in flight, \d+ held\), 3 per replica: wanted above 1 for \d+ s$/);
    // scale_up_after_s (1 s), plus the load's publication (1 s) and a round; slack for a busy machine.
    expect(new Date(up!.at).getTime() - started).toBeLessThan(4000);
    await waitForEndpoint(server.url, "follows", "three ready", (e) => e.ready_replicas === 3);

    // The load ends: after scale_down_after_s with no request, down to zero, draining first.
    const idle = await waitForEndpoint(server.url, "follows", "idle", (e) => e.state === "idle" && (e.instances ?? []).length === 0, 60_000);
    expect(idle.replicas).toBe(0);
    await waitFor("no machine", async () => ((await liveMachines(db.knex, "follows")).length === 0 ? true : undefined));
    const seen = await watch();
    expect(seen.most).toBe(3); // never past max_replicas
    expect(seen.highestSpend).toBeLessThanOrEqual(5);
    const events = await eventsOf(server.url, "follows");
    expect(kinds(events).filter((k) => k === "idle")).toHaveLength(1);
    expect(kinds(events).filter((k) => k === "drained")).toHaveLength(3);
    expect(events.find((e) => e.kind === "idle")!.detail).toMatch(/^replicas 3 -> 0: load 0 .*wanted below 3 for 3\d s$/);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(metrics).toContain('gpu_endpoint_target_replicas{endpoint="follows"} 0');
  }, 120_000);

  it("scales on load that arrives only at another service process", async () => {
    await createEndpoint(server.url, { name: "elsewhere", template_name: "budget", max_cost_per_hour: 5, autoscale: { ...AUTOSCALE, min_replicas: 1 } });
    await waitForEndpoint(server.url, "elsewhere", "ready", (e) => e.state === "ready");
    const streams = await Promise.all(Array.from({ length: 8 }, () => stream(standby, "elsewhere")));
    expect(streams.every((s) => s.status === 200 && s.complete)).toBe(true);
    // The leader saw none of these requests itself: it scaled on what the other process published.
    expect(scaledTo(await eventsOf(server.url, "elsewhere"), 3)).toBeDefined();
    await waitForEndpoint(server.url, "elsewhere", "three", (e) => e.replicas === 3);
  }, 60_000);

  it("answers 503 with Retry-After past the hold limit, and at once past the queue bound, leaving no count behind", async () => {
    market.failNextCreate(new Error("no capacity on the host")); // the wake's launch fails: backoff 10 s, past the 5 s hold
    await createEndpoint(server.url, { name: "waits", template_name: "budget", max_cost_per_hour: 5, autoscale: AUTOSCALE });
    const answers = await Promise.all(Array.from({ length: 5 }, () => stream(server, "waits")));
    const sorted = answers.sort((a, b) => a.at - b.at);
    expect(sorted.map((a) => a.status)).toEqual([503, 503, 503, 503, 503]);
    expect(sorted.every((a) => a.retryAfter !== null)).toBe(true);
    // The fifth found four waiting (GPU_ENDPOINT_HOLD_MAX) and was answered at once; the others after 5 s.
    expect(sorted[1]!.at - sorted[0]!.at).toBeGreaterThan(3000);
    expect(kinds(await eventsOf(server.url, "waits"))).toContain("launch_failed");
    await waitFor("no held request counted", async () => {
      const rows = (await db.knex("gpu_endpoint_load").sum({ held: "held", in_flight: "in_flight" })) as Array<{ held: string; in_flight: string }>;
      return Number(rows[0]!.held) === 0 && Number(rows[0]!.in_flight) === 0 ? true : undefined;
    });
    expect((await getEndpoint(server.url, "waits")).state).not.toBe("deleted");
  }, 60_000);
});

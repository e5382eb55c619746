import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { rest, waitFor } from "../helpers.js";
import { createEndpoint, eventsOf, FAST_ENDPOINT_ENV, streamLoad, waitForEndpoint, watchFewestReady, watchMachines, type EndpointJson, type EventJson } from "./helpers.js";

// Interruptible replicas on vast.ai's wire format (the emulator): bids spread over machines while
// offers on other machines fit, and an outbid machine (actual_status "stopped") is seen as a
// preemption and replaced by another bid; under streaming load, one bid outbid, then every bid
// outbid while none fits (fallback on demand, a wait while bids cost more than the fallbacks, and
// back to bids once they fit again).

let svc: VastService;

beforeAll(async () => {
  svc = await startVastService(
    { apiKey: "vast-bids-endpoint-0123456789", provisioningMs: 100, loadingMs: 100 },
    { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "100" },
  );
});

afterAll(async () => {
  await svc?.close();
});

const CAPACITY = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 };
type Instance = NonNullable<EndpointJson["instances"]>[number] & { interruptible?: boolean };
const instancesOf = (e: EndpointJson) => (e.instances ?? []) as Instance[];
const readyBids = (e: EndpointJson) => instancesOf(e).filter((i) => i.state === "ready" && i.interruptible);
const kinds = (events: EventJson[]) => events.map((e) => e.kind);
const recordOf = async (instanceId: string, on: VastService = svc) =>
  (await on.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string; machine_id: string; bid_per_hour: number };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("interruptible replicas on vast.ai", () => {
  it("spreads bids over machines, and replaces an outbid one with another bid", async () => {
    await createEndpoint(svc.server.url, { name: "spread", template_name: "budget", replicas: 1, max_cost_per_hour: 5, capacity: CAPACITY });
    const first = await waitForEndpoint(svc.server.url, "spread", "one bid ready", (e) => readyBids(e).length === 1, 30_000);
    const { offer_id: firstAsk, machine_id: crowded } = (await svc.db.knex("gpu_instances").where({ instance_id: readyBids(first)[0]!.instance_id }).first()) as {
      offer_id: string;
      machine_id: string;
    };
    // Every other ask of the same GPUs (the next cheapest that fit) is on that machine too: without
    // spreading, the second replica would land on it.
    const model = svc.vast.asks.find((a) => String(a.id) === firstAsk)!;
    for (const ask of svc.vast.asks) if (ask.gpu_name === model.gpu_name && ask.num_gpus === model.num_gpus) ask.machine_id = Number(crowded);
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/spread", { replicas: 2 })).status).toBe(200);
    const ready = await waitForEndpoint(svc.server.url, "spread", "two bids ready", (e) => readyBids(e).length === 2, 30_000);
    const records = await Promise.all(readyBids(ready).map((i) => recordOf(i.instance_id)));
    expect(new Set(records.map((r) => r.machine_id)).size).toBe(2);
    // The create asked vast.ai for a bid: `price` on PUT /asks/{id}/.
    const bids = svc.vast.requests.filter((r) => r.method === "PUT" && r.path.startsWith("/api/v0/asks/") && typeof (r.body as { price?: number }).price === "number");
    expect(bids.length).toBeGreaterThanOrEqual(2);

    const victim = readyBids(ready)[0]!.instance_id;
    svc.vast.outbid(Number((await recordOf(victim)).market_instance_id));
    await waitFor("preempted", async () => ((await eventsOf(svc.server.url, "spread")).some((e) => e.kind === "preempted" && e.instance_id === victim) ? true : undefined), 10_000);
    const healed = await waitForEndpoint(svc.server.url, "spread", "two bids again", (e) => readyBids(e).length === 2 && !readyBids(e).some((i) => i.instance_id === victim), 30_000);
    expect(readyBids(healed)).toHaveLength(2);
    expect(svc.vast.instances.has(Number((await recordOf(victim)).market_instance_id))).toBe(false); // destroyed: its storage bills no more
    expect((await rest(svc.server.url, "DELETE", "/api/gpu/endpoints/spread")).status).toBe(200);
    await waitForEndpoint(svc.server.url, "spread", "deleted", (e) => e.state === "deleted", 30_000);
  }, 60_000);
});

describe("interruptible replicas on vast.ai under streaming load", () => {
  // The status sync every 5 s: a preemption seen within a second was seen by the failed probe's own status read.
  // A look for a cheaper bid every 0.5 s (GPU_ENDPOINT_MIX_RECHECK_MS).
  const RECHECK_MS = 500;
  let loaded: VastService;

  beforeAll(async () => {
    loaded = await startVastService(
      { apiKey: "vast-bids-load-0123456789", provisioningMs: 100, loadingMs: 100 },
      { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "5000", GPU_ENDPOINT_MIX_RECHECK_MS: String(RECHECK_MS) },
    );
  });

  afterAll(async () => {
    await loaded?.close();
  });

  it("replaces an outbid bid seen within one probe; with every bid outbid and none fitting, falls back on demand and returns to bids; no request that had not started fails, the budget holds at every sample", async () => {
    const url = loaded.server.url;
    const marketIdOf = async (instanceId: string) => Number((await recordOf(instanceId, loaded)).market_instance_id);
    await createEndpoint(url, { name: "loaded", template_name: "budget", replicas: 2, max_cost_per_hour: 5, capacity: CAPACITY });
    const ready = await waitForEndpoint(url, "loaded", "two bids ready", (e) => readyBids(e).length === 2, 30_000);
    const spend = watchMachines(loaded.db.knex, "loaded");
    const stop = streamLoad(url, "loaded", 4);
    await sleep(1000);

    // One bid outbid.
    const victim = readyBids(ready)[0]!.instance_id;
    const victimMarketId = await marketIdOf(victim);
    const outbidAt = Date.now();
    loaded.vast.outbid(victimMarketId);
    const event = await waitFor("the preempted event", async () => (await eventsOf(url, "loaded")).find((e) => e.kind === "preempted" && e.instance_id === victim), 10_000);
    expect(Date.parse(event.at) - outbidAt).toBeLessThan(2000);
    const healed = await waitForEndpoint(url, "loaded", "two bids again", (e) => readyBids(e).length === 2 && !readyBids(e).some((i) => i.instance_id === victim), 30_000);
    expect(loaded.vast.instances.has(victimMarketId)).toBe(false);
    // The preemption's timeline from the events, for the record: the victim's, then its replacement's.
    const replacement = readyBids(healed).find((i) => !readyBids(ready).some((r) => r.instance_id === i.instance_id))!.instance_id;
    const timeline = (await eventsOf(url, "loaded"))
      .filter((e) => Date.parse(e.at) >= outbidAt && (e.instance_id === victim || e.instance_id === replacement))
      .map((e) => `${e.kind} ${e.instance_id} +${Date.parse(e.at) - outbidAt} ms`);
    console.log(`preemption timeline (outbid at 0, probes every ${FAST_ENDPOINT_ENV.GPU_ENDPOINT_PROBE_MS} ms, status sync every 5 s): ${timeline.join(", ")}`);

    // Every bid outbid at once, and no bid fits any more: each machine's min_bid ten times its
    // on-demand price (at its own on-demand price, a bid could still undercut another machine's).
    const minBids = loaded.vast.asks.map((a) => a.min_bid);
    for (const ask of loaded.vast.asks) ask.min_bid = ask.dph_base * 10;
    for (const bid of readyBids(healed)) loaded.vast.outbid(await marketIdOf(bid.instance_id));
    await waitForEndpoint(
      url,
      "loaded",
      "two on-demand fallbacks ready",
      (e) => e.ready_replicas === 2 && instancesOf(e).filter((i) => i.state === "ready" && !i.interruptible).length === 2,
      30_000,
    );
    // Two rented on-demand (the wait for a bid, below, is a fallback event too).
    expect((await eventsOf(url, "loaded")).filter((e) => e.kind === "fallback" && e.detail.includes("rented on-demand"))).toHaveLength(2);
    // A try to return finds no bid: a wait (one event), no failure.
    const waits = async () => (await eventsOf(url, "loaded")).filter((e) => e.detail.includes("stays until a bid takes its place"));
    const waiting = await waitFor("a return found no bid", async () => (await waits())[0], 15_000);
    console.log(`the way back waits: ${waiting.detail}`);

    // Bids back, but dearer than the fallbacks (and than any on-demand machine that fits), yet
    // within the template's price and the budget: the way back rents none of them (it rented the
    // first, then drained the cheaper fallback) over several rechecks, and writes no new event.
    const dearerAt = Date.now();
    for (const ask of loaded.vast.asks) ask.min_bid = 0.32;
    await sleep(4 * RECHECK_MS);
    const sinceDearer = (await eventsOf(url, "loaded")).filter((e) => Date.parse(e.at) >= dearerAt);
    expect(sinceDearer.filter((e) => e.kind === "launched" || e.kind === "launch_failed")).toEqual([]);
    expect(await waits()).toHaveLength(1);

    // Bids fit again: back to bids, never fewer ready replicas on the way.
    const wayBack = watchFewestReady(url, "loaded");
    loaded.vast.asks.forEach((ask, i) => (ask.min_bid = minBids[i]!));
    const back = await waitForEndpoint(url, "loaded", "two bids again, the fallbacks gone", (e) => readyBids(e).length === 2 && instancesOf(e).length === 2, 90_000);
    expect(back).toMatchObject({ interruptible_replicas: 2, on_demand_replicas: 0 });
    expect(await wayBack()).toBeGreaterThanOrEqual(2);
    await sleep(500);

    const tally = await stop();
    expect(tally.failedBeforeStart).toBe(0);
    expect(tally.complete).toBeGreaterThan(20);
    const overall = await spend();
    expect(overall.most).toBeLessThanOrEqual(3); // replicas + 1, a preempted machine counting until destroyed
    expect(overall.highestSpend).toBeLessThanOrEqual(5);
    const events = kinds(await eventsOf(url, "loaded"));
    expect(events.filter((k) => k === "preempted")).toHaveLength(3);
    expect(events.filter((k) => k === "drained")).toHaveLength(2); // each fallback drained once a bid was ready in its place
    expect(events).not.toContain("launch_failed");
    expect((await rest(url, "DELETE", "/api/gpu/endpoints/loaded")).status).toBe(200);
    await waitForEndpoint(url, "loaded", "deleted", (e) => e.state === "deleted", 30_000);
    expect([...loaded.vast.instances.keys()]).toEqual([]);
  }, 180_000);
});


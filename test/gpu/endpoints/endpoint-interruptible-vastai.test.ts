import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { rest, waitFor } from "../helpers.js";
import { createEndpoint, eventsOf, FAST_ENDPOINT_ENV, waitForEndpoint, type EndpointJson } from "./helpers.js";

// Interruptible replicas on vast.ai's wire format (the emulator): bids spread over machines while
// offers on other machines fit, and an outbid machine (actual_status "stopped") is seen as a
// preemption and replaced by another bid.

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
const readyBids = (e: EndpointJson) => ((e.instances ?? []) as Instance[]).filter((i) => i.state === "ready" && i.interruptible);
const recordOf = async (instanceId: string) =>
  (await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string; machine_id: string; bid_per_hour: number };

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

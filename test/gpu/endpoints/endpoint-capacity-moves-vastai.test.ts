import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { rest } from "../helpers.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, streamLoad, waitForEndpoint, watchFewestReady, watchMachines, type EndpointJson } from "./helpers.js";

// Interruptible replicas on vast.ai's wire format (the emulator), as an operator changes them and
// as vast.ai limits reads.
//
// A PATCH of `capacity` moves the running replicas, the new one first: `interruptible: false`
// turns every bid into an on-demand machine, one at a time, each bid draining once its
// replacement is ready, never fewer ready replicas, replicas + 1 machines and the budget at every
// sample, and no request that had not started fails.
//
// vast.ai limits reads (about one show call every 2 s), and the same limiter serves the creates:
// a bid replica still loading its model fails its probes for minutes, and only a ready one that
// fails a probe is read at once (a preemption seen within one probe). One loading is left to the
// status sync's single list call.

let svc: VastService;
const MODEL_LOAD_MS = 2000;

beforeAll(async () => {
  svc = await startVastService(
    { apiKey: "vast-bid-reads-0123456789", provisioningMs: 100, loadingMs: 100, modelLoadMs: MODEL_LOAD_MS },
    { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "1000" },
  );
});

afterAll(async () => {
  await svc?.close();
});

type Instance = NonNullable<EndpointJson["instances"]>[number] & { interruptible?: boolean };
const instancesOf = (e: EndpointJson) => (e.instances ?? []) as Instance[];

describe("a PATCH of capacity", () => {
  it("moves every bid to on-demand when interruptible is turned off, the new replica first", async () => {
    const url = svc.server.url;
    const capacity = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 };
    await createEndpoint(url, { name: "moves", template_name: "budget", replicas: 2, max_cost_per_hour: 5, capacity });
    await waitForEndpoint(url, "moves", "two bids ready", (e) => instancesOf(e).filter((i) => i.state === "ready" && i.interruptible).length === 2, 60_000);
    const machines = watchMachines(svc.db.knex, "moves");
    const fewestReady = watchFewestReady(url, "moves");
    const stop = streamLoad(url, "moves", 4);
    const patchedAt = Date.now();
    expect((await rest(url, "PATCH", "/api/gpu/endpoints/moves", { capacity: { ...capacity, interruptible: false } })).status).toBe(200);
    const moved = await waitForEndpoint(
      url,
      "moves",
      "two on-demand replicas, no bid left",
      (e) => instancesOf(e).length === 2 && instancesOf(e).every((i) => i.state === "ready" && !i.interruptible),
      90_000,
    );
    expect(moved).toMatchObject({ on_demand_replicas: 2, interruptible_replicas: 0 });
    const tally = await stop();
    const timeline = (await eventsOf(url, "moves"))
      .filter((e) => Date.parse(e.at) >= patchedAt)
      .sort((a, b) => Date.parse(a.at) - Date.parse(b.at))
      .map((e) => `${e.kind}${e.instance_id ? ` ${e.instance_id}` : ""} +${Date.parse(e.at) - patchedAt} ms`);
    console.log(`interruptible turned off at 0: ${timeline.join(", ")}`);
    expect(await fewestReady()).toBeGreaterThanOrEqual(2);
    const watched = await machines();
    expect(watched.most).toBeLessThanOrEqual(3);
    expect(watched.highestSpend).toBeLessThanOrEqual(5);
    expect(tally.failedBeforeStart).toBe(0);
    expect(timeline.filter((line) => line.startsWith("drained"))).toHaveLength(2);
    await deleteAndWait(url, "moves", svc.db.knex);
  }, 150_000);
});

describe("a bid replica loading its model", () => {
  it("is not read from vast.ai at each failed probe: its loading costs no show call beyond its creation's", async () => {
    const capacity = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 };
    await createEndpoint(svc.server.url, { name: "loading", template_name: "budget", replicas: 1, max_cost_per_hour: 5, capacity });
    const ready = await waitForEndpoint(svc.server.url, "loading", "one bid ready", (e) => e.ready_replicas === 1, 30_000);
    const instanceId = ready.instances![0]!.instance_id;
    const { market_instance_id: marketId } = (await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string };
    const shows = svc.vast.requests.filter((r) => r.method === "GET" && r.path === `/api/v0/instances/${marketId}/`);
    const probes = Math.floor(MODEL_LOAD_MS / Number(FAST_ENDPOINT_ENV.GPU_ENDPOINT_PROBE_MS));
    console.log(`show calls for ${instanceId} while its model loaded (${MODEL_LOAD_MS} ms, about ${probes} failed probes): ${shows.length}`);
    // The one show call is the creation's own look at what it rented.
    expect(shows).toHaveLength(1);
    await deleteAndWait(svc.server.url, "loading", svc.db.knex);
  }, 60_000);
});

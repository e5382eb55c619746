import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { createEndpoint, deleteAndWait, FAST_ENDPOINT_ENV, waitForEndpoint } from "./helpers.js";

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

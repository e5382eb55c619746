import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../../src/gpu/creation/launch-plan.js";
import { findTemplate } from "../../../../src/gpu/creation/templates.js";
import { startVastRunpodService, type VastRunpodService } from "../../../support/markets/vast-and-runpod.js";
import { fitsTemplate, type VastAsk } from "../../../support/vastai/catalogue.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, readyIds, waitForEndpoint } from "../../endpoints/helpers.js";
import { rest } from "../../helpers.js";
import { marketsApi } from "./markets-api.js";
import { withDisk } from "../../../../src/gpu/marketplace/runpod/runpod-disk.js";

// SPEC.md section 2, "Several marketplaces": a RunPod catalogue entry is a pool (a GPU type, count
// and cloud with stock), rented by any number of live records at once; and a bid market that fails
// never hides the on-demand offers of another market from an interruptible slot with `fallback`.
// MARKETPLACE=vastai,runpod on both emulators and the real PostgreSQL.

let service: VastRunpodService;
const { url, record } = marketsApi(() => service);
const RTX_4090_COMMUNITY = "runpod:community-1x-NVIDIA_GeForce_RTX_4090";
/** What its pods bill: $0.34/h for the GPU, and the template's 100 GB container disk at $0.10 per GB-month. */
const BILLED = withDisk(0.34, 100);

beforeAll(async () => {
  service = await startVastRunpodService({ ...FAST_ENDPOINT_ENV, GPU_STATUS_SYNC_MS: "100" });
});

afterAll(async () => {
  await service?.close();
  expect(service.runpod.breaches).toEqual([]);
});

let saved: VastAsk[] = [];
afterEach(async () => {
  for (const [i, ask] of saved.entries()) Object.assign(service.vast.asks[i]!, ask);
  saved = [];
  service.vast.failNext(0, 503);
  const live = await service.db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"]).select("instance_id");
  for (const { instance_id } of live) await rest(url(), "DELETE", `/api/gpu/instances/${instance_id}`);
});

/** vast.ai's offers for the budget template made dearer than RunPod's cheapest ($0.34/h), still under the template's cap. */
function makeVastDearer(): void {
  saved = service.vast.asks.map((a) => ({ ...a }));
  for (const ask of service.vast.asks.filter((a) => a.rentable && a.verified && fitsTemplate(a, findTemplate("budget")!, LLM_DISK_GB))) ask.dph_base += 0.2;
}

const podsOf = (ids: readonly string[]) => [...service.runpod.pods.values()].filter((p) => ids.some((id) => p.name.includes(id)));

describe("pool offers: a RunPod catalogue entry is rented by any number of records at once", () => {
  it("rents a named RunPod offer twice while the first pod lives, with no 409", async () => {
    const first = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances", { offer_id: RTX_4090_COMMUNITY, template_name: "budget" });
    expect(first.status).toBe(200);
    const second = await rest<{ instance_id: string; detail?: string }>(url(), "POST", "/api/gpu/instances", { offer_id: RTX_4090_COMMUNITY, template_name: "budget" });
    expect(second.body.detail).toBeUndefined();
    expect(second.status).toBe(200);
    for (const id of [first.body.instance_id, second.body.instance_id]) {
      expect(await record(id)).toMatchObject({ market: "runpod", offer_id: RTX_4090_COMMUNITY, cost_per_hour: BILLED });
    }
    expect(podsOf([first.body.instance_id, second.body.instance_id])).toHaveLength(2);
  });

  it("gives an endpoint of 3 replicas 3 pods of its cheapest fitting RunPod type, each at its price", async () => {
    makeVastDearer();
    await createEndpoint(url(), { name: "three-pods", template_name: "budget", replicas: 3, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(url(), "three-pods", "3 ready", (e) => e.state === "ready" && readyIds(e).length === 3, 40_000);
    const replicas = readyIds(ready);
    const rows = await Promise.all(replicas.map((id) => record(id)));
    for (const row of rows) expect(row).toMatchObject({ market: "runpod", offer_id: RTX_4090_COMMUNITY, cost_per_hour: BILLED });
    const pods = podsOf(replicas);
    expect(pods.map((p) => [p.cloud, p.type.id, p.count])).toEqual(Array.from({ length: 3 }, () => ["COMMUNITY", "NVIDIA GeForce RTX 4090", 1]));
    console.log(`endpoint of 3 on RunPod: ${rows.map((r) => `${r.instance_id} ${r.offer_id} $${r.cost_per_hour}/h`).join("; ")}`);
    const events = await eventsOf(url(), "three-pods");
    expect(events.filter((e) => e.kind === "launch_failed")).toEqual([]);
    await deleteAndWait(url(), "three-pods", service.db.knex);
  });
});

describe("a failing bid market never hides another market's on-demand offers", () => {
  it("rents an interruptible slot's fallback on RunPod while vast.ai answers 503 to everything", async () => {
    service.vast.failNext(1_000_000, 503);
    const from = Date.now();
    await createEndpoint(url(), {
      name: "fallback-on-runpod",
      template_name: "budget",
      replicas: 1,
      max_cost_per_hour: 5,
      capacity: { interruptible: true, on_demand_base: 0, fallback: true },
    });
    const ready = await waitForEndpoint(url(), "fallback-on-runpod", "ready on its fallback", (e) => e.state === "ready", 30_000);
    const [replica] = readyIds(ready) as [string];
    const row = await record(replica);
    expect(row).toMatchObject({ market: "runpod", offer_id: RTX_4090_COMMUNITY, interruptible: false });
    const events = (await eventsOf(url(), "fallback-on-runpod")).filter((e) => Date.parse(e.at) >= from);
    // The launch did not fail (only the later way back to a bid does, while vast.ai's bid search is down).
    expect(events.filter((e) => e.kind === "launch_failed" && !e.detail.startsWith("the move of"))).toEqual([]);
    expect(events.find((e) => e.kind === "fallback")?.instance_id).toBe(replica);
    // vast.ai was asked (its bid search answered 503) and rented nothing.
    expect(service.vast.requests.filter((r) => r.at >= from && r.status === 503).length).toBeGreaterThan(0);
    expect(service.vast.requests.filter((r) => r.method === "PUT" && r.at >= from)).toEqual([]);
    console.log(`vast.ai answering 503: fallback ${replica} rented on ${row.market} ${row.offer_id} at $${row.cost_per_hour}/h`);
    await deleteAndWait(url(), "fallback-on-runpod", service.db.knex);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../helpers.js";
import { createEndpoint, deleteAndWait, eventsOf, liveMachines, startSimulatedService, waitForEndpoint, type SimulatedService } from "./helpers.js";

// Scale to zero as a user meets it, on the real service and the simulated marketplace: an idle
// endpoint woken by a request that is never held (holding off: it is answered 503 at once), a few
// quick requests answered between two samples of the load, then silence: the endpoint goes idle
// scale_down_after_s after the last request, and no machine is left billing.

const SCALE_DOWN_AFTER_S = 30;
let svc: SimulatedService;

beforeAll(async () => {
  svc = await startSimulatedService({}, { GPU_ENDPOINT_HOLD_MS: "0" });
});

afterAll(async () => {
  await svc?.close();
});

const complete = async (name: string) => {
  const res = await fetch(`${svc.server.url}/endpoints/${name}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt: "hi", max_tokens: 1 }),
  });
  await res.text();
  return res.status;
};

describe("scale to zero", () => {
  it("wakes at a request never held, and goes idle scale_down_after_s after a few quick requests", async () => {
    const autoscale = { min_replicas: 0, max_replicas: 2, target_in_flight: 4, scale_up_after_s: 0, scale_down_after_s: SCALE_DOWN_AFTER_S };
    await createEndpoint(svc.server.url, { name: "quick", template_name: "budget", max_cost_per_hour: 5, autoscale });
    const start = Date.now();
    // Holding is off: the caller hears 503 at once, and the endpoint wakes all the same.
    expect(await complete("quick")).toBe(503);
    const woke = await waitFor("woke", async () => (await eventsOf(svc.server.url, "quick")).find((e) => e.kind === "woke"), 10_000);
    await waitForEndpoint(svc.server.url, "quick", "ready", (e) => e.ready_replicas === 1, 30_000);

    // A few one-token requests, each over well within a load sample.
    for (let i = 0; i < 3; i++) expect(await complete("quick")).toBe(200);
    const lastRequest = Date.now();

    const idle = await waitFor("idle", async () => (await eventsOf(svc.server.url, "quick")).find((e) => e.kind === "idle"), (SCALE_DOWN_AFTER_S + 30) * 1000);
    const idleAfterS = (Date.parse(idle.at) - lastRequest) / 1000;
    const timeline = (await eventsOf(svc.server.url, "quick"))
      .sort((a, b) => Date.parse(a.at) - Date.parse(b.at))
      .map((e) => `${e.kind}${e.instance_id ? ` ${e.instance_id}` : ""} +${((Date.parse(e.at) - start) / 1000).toFixed(1)} s`);
    console.log(`scale to zero (requests at +0 and until +${((lastRequest - start) / 1000).toFixed(1)} s): ${timeline.join(", ")}`);
    expect(Date.parse(woke.at) - start).toBeLessThan(5000);
    expect(idleAfterS).toBeGreaterThanOrEqual(SCALE_DOWN_AFTER_S - 1);
    expect(idleAfterS).toBeLessThan(SCALE_DOWN_AFTER_S + 10);
    await waitFor("no machine billing", async () => ((await liveMachines(svc.db.knex, "quick")).length === 0 ? true : undefined), 20_000);
    await deleteAndWait(svc.server.url, "quick", svc.db.knex);
  }, 120_000);
});

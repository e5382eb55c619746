import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../helpers.js";
import { createEndpoint, eventsOf, startSimulatedService, waitForEndpoint, type SimulatedService } from "./helpers.js";

// A replica whose model server never answers (a weights download that never ends) is replaced
// once GPU_ENDPOINT_START_TIMEOUT_MS has passed since its launch; its replacement is launched
// beside it and it is destroyed once the replacement is ready.

let svc: SimulatedService;

beforeAll(async () => {
  svc = await startSimulatedService({ modelServerStartMs: 300 }, { GPU_ENDPOINT_START_TIMEOUT_MS: "2000" });
});

afterAll(async () => {
  await svc?.close();
});

describe("start timeout", () => {
  it("replaces a replica never ready within the start timeout", async () => {
    await createEndpoint(svc.server.url, { name: "slow-start", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const first = await waitFor("the first replica's machine", async () => {
      const row = await svc.db.knex("gpu_instances").where({ endpoint: "slow-start" }).whereNotNull("market_instance_id").first();
      return row as { instance_id: string; market_instance_id: string } | undefined;
    });
    await svc.market.stopModelServer(first.market_instance_id);
    const ready = await waitForEndpoint(svc.server.url, "slow-start", "ready on a replacement", (e) => e.state === "ready" && e.instances?.length === 1, 30_000);
    expect(ready.instances![0]!.instance_id).not.toBe(first.instance_id);
    const events = await eventsOf(svc.server.url, "slow-start");
    expect(events.filter((e) => e.instance_id === first.instance_id).map((e) => e.kind)).toEqual(["launched", "unhealthy", "replaced"]);
    expect(events.find((e) => e.kind === "unhealthy")!.detail).toMatch(/not ready within 2 s of its launch/);
    expect((await svc.db.knex("gpu_instances").where({ instance_id: first.instance_id }).first()).status).toBe("destroyed");
  });
});

import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { rest, waitFor } from "../helpers.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, waitForEndpoint } from "./helpers.js";

// The controller's rounds against vast.ai's wire format (the emulator): a launch the budget holds
// back backs off instead of searching offers every round; a market where nothing fits at all is a
// launch failure, not a budget hold; one endpoint's slow rental holds no other endpoint, nor its
// own removals; a change made while a rental is under way is seen before the next one.

let svc: VastService;

beforeAll(async () => {
  svc = await startVastService(
    { apiKey: "vast-rounds-0123456789", provisioningMs: 100, loadingMs: 100 },
    { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "100" },
  );
});

let rentable: boolean[] = [];

afterEach(() => {
  svc.vast.onCreate(undefined);
  svc.vast.asks.forEach((ask, i) => (ask.rentable = rentable[i] ?? ask.rentable));
});

afterAll(async () => {
  await svc?.close();
});

const searches = () => svc.vast.requests.filter((r) => r.method === "POST" && r.path === "/api/v0/bundles/").length;
const createsFor = (name: string) =>
  svc.vast.requests.filter((r) => r.method === "PUT" && r.path.startsWith("/api/v0/asks/") && String((r.body as { label?: string }).label).endsWith(`/${name}`)).length;
const kindsOf = async (name: string) => (await eventsOf(svc.server.url, name)).map((e) => e.kind);
const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise that the test resolves by hand. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

describe("endpoint rounds on vast.ai", () => {
  it("backs a budget hold off instead of searching vast.ai's offers every round", async () => {
    await createEndpoint(svc.server.url, { name: "held-back", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "held-back", "ready", (e) => e.state === "ready");
    // Room for one more at half the first one's price: no offer is that cheap.
    const budget = Math.round(ready.cost_per_hour * 1.5 * 10_000) / 10_000;
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/held-back", { replicas: 2, max_cost_per_hour: budget })).status).toBe(200);
    await waitFor("budget_held", async () => ((await kindsOf("held-back")).includes("budget_held") ? true : undefined));
    const before = searches();
    await settle(2000); // forty decision rounds, within the first backoff step (10 s)
    expect(searches() - before).toBe(0);
    const events = await kindsOf("held-back");
    expect(events.filter((k) => k === "budget_held")).toHaveLength(1);
    expect(events).not.toContain("launch_failed");
    await deleteAndWait(svc.server.url, "held-back", svc.db.knex);
  });

  it("reports a market where no offer fits the template at all as a launch failure, not a budget hold", async () => {
    rentable = svc.vast.asks.map((ask) => ask.rentable);
    for (const ask of svc.vast.asks) ask.rentable = false;
    // A budget below the template's own max_price: the launch searches under it and finds nothing.
    await createEndpoint(svc.server.url, { name: "nothing-fits", template_name: "budget", replicas: 1, max_cost_per_hour: 0.3 });
    await waitFor("launch_failed", async () => ((await kindsOf("nothing-fits")).includes("launch_failed") ? true : undefined));
    const events = await eventsOf(svc.server.url, "nothing-fits");
    expect(events.map((e) => e.kind)).not.toContain("budget_held");
    expect(events.find((e) => e.kind === "launch_failed")!.detail).toMatch(/No rentable offer matches template 'budget'/);
    await deleteAndWait(svc.server.url, "nothing-fits", svc.db.knex);
  });

  it("brings one endpoint to ready while another's rental waits on vast.ai", async () => {
    const release = gate();
    svc.vast.onCreate(async (body) => {
      if (String((body as { label?: string }).label).endsWith("/slow")) await release.opened;
    });
    await createEndpoint(svc.server.url, { name: "slow", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await waitFor("the slow create at vast.ai", async () => (createsFor("slow") === 1 ? true : undefined));
    await createEndpoint(svc.server.url, { name: "fast", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "fast", "ready while the other rents", (e) => e.state === "ready", 10_000);
    release.open();
    await waitForEndpoint(svc.server.url, "slow", "ready", (e) => e.state === "ready");
    await deleteAndWait(svc.server.url, "fast", svc.db.knex);
    await deleteAndWait(svc.server.url, "slow", svc.db.knex);
  });

  it("sees a change made while a rental is under way before it rents the next replica", async () => {
    const arrived = gate();
    const release = gate();
    svc.vast.onCreate(async () => {
      arrived.open();
      await release.opened;
    });
    await createEndpoint(svc.server.url, { name: "patched", template_name: "budget", replicas: 3, max_cost_per_hour: 5 });
    await arrived.opened;
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/patched", { replicas: 1 })).status).toBe(200);
    svc.vast.onCreate(undefined);
    release.open();
    await waitForEndpoint(svc.server.url, "patched", "ready with one", (e) => e.state === "ready");
    await settle(1000);
    expect(createsFor("patched")).toBe(1);
    await deleteAndWait(svc.server.url, "patched", svc.db.knex);
  });

  it("removes a replica whose machine ended while the endpoint's own scale-up waits on vast.ai", async () => {
    await createEndpoint(svc.server.url, { name: "own-lane", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "own-lane", "two ready", (e) => e.ready_replicas === 2);
    const arrived = gate();
    const release = gate();
    svc.vast.onCreate(async () => {
      arrived.open();
      await release.opened;
    });
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/own-lane", { replicas: 3 })).status).toBe(200);
    await arrived.opened;
    const victim = ready.instances![0]!.instance_id;
    const { market_instance_id: marketId } = (await svc.db.knex("gpu_instances").where({ instance_id: victim }).first()) as { market_instance_id: string };
    svc.vast.setStatus(Number(marketId), "exited");
    // Its rental still waits at vast.ai: the removal does not wait behind it.
    await waitFor("the ended replica removed", async () => ((await eventsOf(svc.server.url, "own-lane")).some((e) => e.kind === "ended" && e.instance_id === victim) ? true : undefined), 5_000);
    expect(createsFor("own-lane")).toBe(3);
    svc.vast.onCreate(undefined);
    release.open();
    await waitForEndpoint(svc.server.url, "own-lane", "three ready", (e) => e.ready_replicas === 3, 20_000);
    await deleteAndWait(svc.server.url, "own-lane", svc.db.knex);
  });
});

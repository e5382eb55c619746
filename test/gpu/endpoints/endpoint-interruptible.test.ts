import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../helpers.js";
import {
  createEndpoint,
  deleteAndWait,
  eventsOf,
  startSimulatedService,
  streamLoad,
  waitForEndpoint,
  watchFewestReady,
  watchMachines,
  type EndpointJson,
  type EventJson,
  type SimulatedService,
} from "./helpers.js";

// Interruptible replicas with on-demand fallback, end to end on the real service and the simulated
// marketplace (bids at half the on-demand price, preempted on demand). The first test's service
// runs the status sync every 5 s, so a preemption seen within a second was seen by the failed
// probe's own status read; the others share a service that syncs every 100 ms and looks for a
// cheaper bid every 0.5 s (GPU_ENDPOINT_MIX_RECHECK_MS).

const BUDGET = 5;
const CAPACITY = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: 0.25 };
const RECHECK_MS = 500;

/** The service of the tests after the first (started by their describe). */
let svc: SimulatedService;

type Instance = NonNullable<EndpointJson["instances"]>[number] & { interruptible?: boolean };
const instancesOf = (e: EndpointJson) => (e.instances ?? []) as Instance[];
const readyBids = (e: EndpointJson) => instancesOf(e).filter((i) => i.state === "ready" && i.interruptible);
const kinds = (events: EventJson[]) => events.map((e) => e.kind);
const instanceSequence = async () => Number(((await svc.db.knex.raw("select last_value from gpu_instance_id_seq")) as { rows: Array<{ last_value: string }> }).rows[0]!.last_value);
const controlRow = async (name: string) =>
  (await svc.db.knex("gpu_endpoints").where({ name }).whereNot({ phase: "deleted" }).first()) as { mix_failures: number; launch_failures: number; next_mix_at: Date | null; mix_wait_since: Date | null };
const marketIdOf = async (instanceId: string, on: SimulatedService = svc) =>
  ((await on.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string }).market_instance_id;

describe("interruptible replicas, the status sync every 5 s", () => {
  let slow: SimulatedService;

  beforeAll(async () => {
    slow = await startSimulatedService({ tokenDelayMs: 100 }, { GPU_STATUS_SYNC_MS: "5000" });
  });

  afterAll(async () => {
    await slow?.close();
  });

  it("replaces a replica outbid under streaming load at once, failing no request that had not started", async () => {
    await createEndpoint(slow.server.url, { name: "outbid", template_name: "budget", replicas: 2, max_cost_per_hour: BUDGET, capacity: CAPACITY });
    const ready = await waitForEndpoint(slow.server.url, "outbid", "two bids ready", (e) => readyBids(e).length === 2, 30_000);
    expect(ready).toMatchObject({ interruptible_replicas: 2, on_demand_replicas: 0 });
    const stop = streamLoad(slow.server.url, "outbid", 6);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const victim = readyBids(ready)[0]!.instance_id;
    const preemptedAt = Date.now();
    await slow.market.preempt(await marketIdOf(victim, slow));
    const event = await waitFor("the preempted event", async () => (await eventsOf(slow.server.url, "outbid")).find((e) => e.kind === "preempted" && e.instance_id === victim), 10_000);
    // Seen by the failed probe's own status read, not by the 5 s status sync.
    expect(Date.parse(event.at) - preemptedAt).toBeLessThan(2000);
    const healed = await waitForEndpoint(slow.server.url, "outbid", "two bids ready again", (e) => readyBids(e).length === 2 && !readyBids(e).some((i) => i.instance_id === victim), 30_000);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const tally = await stop();
    expect(tally.failedBeforeStart).toBe(0);
    expect(tally.complete).toBeGreaterThan(10);
    expect(readyBids(healed)).toHaveLength(2);
    const events = await eventsOf(slow.server.url, "outbid");
    // The probe saw it first (not_ready), then its status read (preempted).
    expect(kinds(events.filter((e) => e.instance_id === victim))).toEqual(["launched", "ready", "not_ready", "preempted"]);
    expect(kinds(events)).not.toContain("launch_failed");
    await deleteAndWait(slow.server.url, "outbid", slow.db.knex);
  }, 60_000);
});

describe("interruptible replicas", () => {
  beforeAll(async () => {
    svc = await startSimulatedService({ tokenDelayMs: 100 }, { GPU_STATUS_SYNC_MS: "100", GPU_ENDPOINT_MIX_RECHECK_MS: String(RECHECK_MS) });
  });

  afterAll(async () => {
    await svc?.close();
  });

  it("falls back to on-demand when every replica is outbid at once, and returns to bids when they fit, never fewer ready replicas on the way back", async () => {
    await createEndpoint(svc.server.url, { name: "falls-back", template_name: "budget", replicas: 2, max_cost_per_hour: BUDGET, capacity: CAPACITY });
    const ready = await waitForEndpoint(svc.server.url, "falls-back", "two bids ready", (e) => readyBids(e).length === 2, 30_000);
    const spend = watchMachines(svc.db.knex, "falls-back");
    svc.market.setBidsOpen(false); // every machine outbid by others: no bid fits anywhere
    for (const bid of readyBids(ready)) await svc.market.preempt(await marketIdOf(bid.instance_id));
    const fallen = await waitForEndpoint(
      svc.server.url,
      "falls-back",
      "two on-demand fallbacks ready",
      (e) => e.ready_replicas === 2 && instancesOf(e).filter((i) => i.state === "ready" && !i.interruptible).length === 2,
      30_000,
    );
    expect(fallen.on_demand_replicas).toBeGreaterThanOrEqual(2);
    const rentedOnDemand = (events: EventJson[]) => events.filter((e) => e.kind === "fallback" && e.detail.includes("rented on-demand"));
    expect(rentedOnDemand(await eventsOf(svc.server.url, "falls-back"))).toHaveLength(2);
    // A try to return finds no bid: it waits, a wait and no failure.
    await waitFor("a return found no bid", async () => ((await eventsOf(svc.server.url, "falls-back")).some((e) => e.detail.includes("stays until a bid takes its place")) ? true : undefined), 10_000);
    const wayBack = watchFewestReady(svc.server.url, "falls-back");
    svc.market.setBidsOpen(true);
    const back = await waitForEndpoint(svc.server.url, "falls-back", "two bids again, fallbacks gone", (e) => readyBids(e).length === 2 && instancesOf(e).length === 2, 60_000);
    expect(back).toMatchObject({ interruptible_replicas: 2, on_demand_replicas: 0 });
    expect(await wayBack()).toBeGreaterThanOrEqual(2);
    const overall = await spend();
    expect(overall.most).toBeLessThanOrEqual(3); // replicas + 1, preempted machines counting until destroyed
    expect(overall.highestSpend).toBeLessThanOrEqual(BUDGET);
    const events = kinds(await eventsOf(svc.server.url, "falls-back"));
    expect(events.filter((k) => k === "preempted")).toHaveLength(2);
    expect(events.filter((k) => k === "drained")).toHaveLength(2); // each fallback drained once its bid was ready
    expect(events).not.toContain("launch_failed");
    await deleteAndWait(svc.server.url, "falls-back", svc.db.knex);
  }, 120_000);

  it("keeps on_demand_base replicas on-demand, and replaces an outbid bid with a bid", async () => {
    await createEndpoint(svc.server.url, { name: "based", template_name: "budget", replicas: 3, max_cost_per_hour: BUDGET, capacity: { ...CAPACITY, on_demand_base: 1 } });
    const ready = await waitForEndpoint(svc.server.url, "based", "three ready", (e) => e.state === "ready", 30_000);
    expect(ready).toMatchObject({ on_demand_replicas: 1, interruptible_replicas: 2 });
    const onDemand = instancesOf(ready).find((i) => !i.interruptible)!.instance_id;
    await svc.market.preempt(await marketIdOf(readyBids(ready)[0]!.instance_id));
    const healed = await waitForEndpoint(svc.server.url, "based", "healed", (e) => e.state === "ready" && readyBids(e).length === 2 && instancesOf(e).length === 3, 30_000);
    expect(instancesOf(healed).find((i) => !i.interruptible)!.instance_id).toBe(onDemand);
    // Each replica on a machine of its own.
    const machines = (await svc.db.knex("gpu_instances").where({ endpoint: "based" }).whereNotIn("status", ["destroyed", "failed"]).pluck("machine_id")) as string[];
    expect(new Set(machines).size).toBe(machines.length);
    await deleteAndWait(svc.server.url, "based", svc.db.knex);
  }, 60_000);

  it("waits for bids without failing: nothing rented, one event per wait, a look again each recheck; never budget_held, and a machine that ends is replaced at once", async () => {
    const url = svc.server.url;
    svc.market.setBidsOpen(false); // no bid anywhere: both replicas fall back, and every return waits
    try {
      await createEndpoint(url, { name: "apart", template_name: "budget", replicas: 2, max_cost_per_hour: BUDGET, capacity: CAPACITY });
      const fallbacks = await waitForEndpoint(url, "apart", "two fallbacks ready", (e) => e.ready_replicas === 2, 30_000);
      await waitFor("the wait for a bid", async () => ((await eventsOf(url, "apart")).some((e) => e.detail.includes("stays until a bid takes its place")) ? true : undefined), 10_000);
      const sequence = await instanceSequence();
      // Ten rechecks (GPU_ENDPOINT_MIX_RECHECK_MS 500 here: ten minutes at the default): each one
      // rents nothing, takes no instance id, writes nothing but the next look, never past the recheck.
      const looks = new Set<number>();
      const until = Date.now() + 10 * RECHECK_MS;
      while (Date.now() < until) {
        const row = await controlRow("apart");
        expect(row.next_mix_at!.getTime() - Date.now()).toBeLessThanOrEqual(RECHECK_MS);
        expect(row).toMatchObject({ mix_failures: 0, launch_failures: 0 });
        looks.add(row.next_mix_at!.getTime());
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(looks.size).toBeGreaterThanOrEqual(8);
      expect(await instanceSequence()).toBe(sequence);
      expect(await svc.db.knex("gpu_instances").where({ endpoint: "apart" }).count({ n: "*" })).toEqual([{ n: "2" }]);
      const events = await eventsOf(url, "apart");
      expect(events.filter((e) => e.detail.includes("stays until a bid takes its place"))).toHaveLength(1);
      expect(events.filter((e) => e.kind === "fallback" && e.detail.includes("rented on-demand"))).toHaveLength(2);
      expect(kinds(events)).not.toContain("launch_failed");
      expect(kinds(events)).not.toContain("budget_held");
      expect((await waitForEndpoint(url, "apart", "ready", (e) => e.state === "ready", 5_000)).state).toBe("ready");

      const victim = instancesOf(fallbacks)[0]!.instance_id;
      const endedAt = Date.now();
      await svc.market.exitInstance(await marketIdOf(victim));
      const replaced = await waitFor(
        "a replacement launched",
        async () => (await eventsOf(url, "apart")).find((e) => e.kind === "launched" && Date.parse(e.at) >= endedAt),
        15_000,
      );
      // Within a few probe rounds and the status sync.
      expect(Date.parse(replaced.at) - endedAt).toBeLessThan(8_000);
    } finally {
      svc.market.setBidsOpen(true);
    }
    await deleteAndWait(url, "apart", svc.db.knex);
  }, 90_000);
});

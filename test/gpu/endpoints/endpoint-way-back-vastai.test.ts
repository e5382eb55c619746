import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../src/gpu/creation/launch-plan.js";
import { storagePerHour } from "../../support/vastai/catalogue.js";
import { startVastService, type VastService } from "../../support/vastai/service.js";
import { rest, waitFor } from "../helpers.js";
import { createEndpoint, deleteAndWait, eventsOf, FAST_ENDPOINT_ENV, waitForEndpoint, type EndpointJson, type EventJson } from "./helpers.js";

// The way back from an on-demand fallback on vast.ai's wire format (the emulator), SPEC.md "Back
// from fallback": while no bid costs at most 90% of the fallback, the return waits (nothing
// rented, no failure, one event), looked at again every GPU_ENDPOINT_MIX_RECHECK_MS (0.5 s here, a
// minute by default: the figures below scale with it); once bids turn cheap, the return starts
// within one recheck. A market run dry (no offer at all) is waited out the same way. Only a rental that fails backs off; a PATCH of capacity and a converged mix
// start that backoff over. A returned bid that dies before it is ready counts against the moves'
// backoff, never against the launches that fill a gap.

const RECHECK_MS = 500;
const BID_MARGIN = 0.25;
const CAPACITY = { interruptible: true, on_demand_base: 0, fallback: true, bid_margin: BID_MARGIN };

let svc: VastService;

beforeAll(async () => {
  svc = await startVastService(
    { apiKey: "vast-way-back-0123456789", provisioningMs: 100, loadingMs: 100 },
    { ...FAST_ENDPOINT_ENV, VAST_MIN_INTERVAL_MS: "0", GPU_STATUS_SYNC_MS: "100", GPU_ENDPOINT_MIX_RECHECK_MS: String(RECHECK_MS) },
  );
});

afterAll(async () => {
  await svc?.close();
});

type Instance = NonNullable<EndpointJson["instances"]>[number] & { interruptible?: boolean };
const instancesOf = (e: EndpointJson) => (e.instances ?? []) as Instance[];
const readyBids = (e: EndpointJson) => instancesOf(e).filter((i) => i.state === "ready" && i.interruptible);
const readyOnDemand = (e: EndpointJson) => instancesOf(e).filter((i) => i.state === "ready" && !i.interruptible);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const isWait = (e: EventJson) => e.kind === "fallback" && e.detail.includes("stays until a bid takes its place");
const recordOf = async (instanceId: string) =>
  (await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string; cost_per_hour: number; interruptible: boolean };
const controlRow = async (name: string) =>
  (await svc.db.knex("gpu_endpoints").where({ name }).whereNot({ phase: "deleted" }).first()) as {
    mix_failures: number;
    launch_failures: number;
    next_mix_at: Date | null;
    mix_wait_since: Date | null;
  };
const instanceSequence = async () => Number(((await svc.db.knex.raw("select last_value from gpu_instance_id_seq")) as { rows: Array<{ last_value: string }> }).rows[0]!.last_value);

/** Every ask's bid (bid x (1 + margin) plus its storage) billed at `share` of `cost` $/h. */
function priceBidsAt(share: number, cost: number): void {
  for (const ask of svc.vast.asks) ask.min_bid = Math.max(0.0001, (share * cost - storagePerHour(ask, LLM_DISK_GB)) / (1 + BID_MARGIN));
}

/** One bid ready, then every bid dear and the bid outbid: a fallback ready in its place, and its cost. */
async function onFallback(name: string): Promise<{ fallback: string; cost: number }> {
  const url = svc.server.url;
  const first = await waitForEndpoint(url, name, "one bid ready", (e) => readyBids(e).length === 1, 30_000);
  for (const ask of svc.vast.asks) ask.min_bid = ask.dph_base * 10;
  svc.vast.outbid(Number((await recordOf(readyBids(first)[0]!.instance_id)).market_instance_id));
  const fallen = await waitForEndpoint(url, name, "a fallback ready", (e) => readyOnDemand(e).length === 1 && instancesOf(e).length === 1, 30_000);
  const fallback = readyOnDemand(fallen)[0]!.instance_id;
  return { fallback, cost: (await recordOf(fallback)).cost_per_hour };
}

describe("the way back from a fallback on vast.ai", () => {
  it("waits through a long dear spell without failing, refuses a bid that saves under 10%, and returns within one recheck once bids turn cheap", async () => {
    const url = svc.server.url;
    await createEndpoint(url, { name: "back", template_name: "budget", replicas: 1, max_cost_per_hour: 5, capacity: CAPACITY });
    const { fallback, cost } = await onFallback("back");
    await waitFor("the wait for a bid", async () => (await eventsOf(url, "back")).find(isWait), 10_000);
    const sequence = await instanceSequence();

    // A long dear spell: twenty rechecks (twenty minutes at the default), then bids that save 5%.
    await sleep(15 * RECHECK_MS);
    priceBidsAt(0.95, cost);
    await sleep(5 * RECHECK_MS);
    const row = await controlRow("back");
    expect(row).toMatchObject({ mix_failures: 0, launch_failures: 0 });
    expect(row.next_mix_at!.getTime() - Date.now()).toBeLessThanOrEqual(RECHECK_MS);
    expect(await instanceSequence()).toBe(sequence); // nothing rented, no instance id taken
    let events = await eventsOf(url, "back");
    expect(events.filter(isWait)).toHaveLength(1);
    expect(events.map((e) => e.kind)).not.toContain("launch_failed");
    expect(events.filter((e) => e.kind === "launched")).toHaveLength(2); // the first bid and the fallback

    // Bids at 80% of the fallback: the return starts within one recheck.
    priceBidsAt(0.8, cost);
    const cheapAt = Date.now();
    const launched = await waitFor(
      "the bid launched to take the fallback's place",
      async () => (await eventsOf(url, "back")).find((e) => e.kind === "launched" && e.detail.includes(`to take ${fallback}'s place`)),
      30_000,
    );
    const back = await waitForEndpoint(url, "back", "the bid ready, the fallback gone", (e) => readyBids(e).length === 1 && instancesOf(e).length === 1, 30_000);
    const backAt = Date.now();
    const waitMs = Date.parse(launched.at) - cheapAt;
    console.log(
      `bids at 80% of the $${cost}/h fallback after ${20 * RECHECK_MS} ms of dear bids (recheck every ${RECHECK_MS} ms): ` +
        `the bid launched +${waitMs} ms, the fallback gone +${backAt - cheapAt} ms`,
    );
    expect(waitMs).toBeLessThanOrEqual(RECHECK_MS + 2000); // one recheck, and a round
    const bid = await recordOf(readyBids(back)[0]!.instance_id);
    expect(bid.interruptible).toBe(true);
    expect(bid.cost_per_hour).toBeLessThanOrEqual(cost * 0.9);
    // Converged: nothing left to move, no wait, no backoff.
    await waitFor("the mix settled", async () => {
      const settled = await controlRow("back");
      return settled.mix_wait_since === null && settled.next_mix_at === null && settled.mix_failures === 0 ? true : undefined;
    }, 10_000);
    events = await eventsOf(url, "back");
    expect(events.filter(isWait)).toHaveLength(1);
    expect(events.map((e) => e.kind)).not.toContain("launch_failed");
    await deleteAndWait(url, "back", svc.db.knex);
  }, 120_000);

  it("waits through a market run dry (no offer at all) without failing, and returns within one recheck once bids come back", async () => {
    const url = svc.server.url;
    await createEndpoint(url, { name: "dry", template_name: "budget", replicas: 1, max_cost_per_hour: 5, capacity: CAPACITY });
    const { fallback, cost } = await onFallback("dry");
    // Nothing to rent at all, as in a shortage: a search finds no offer, bid or on-demand.
    const rentable = svc.vast.asks.map((ask) => ask.rentable);
    for (const ask of svc.vast.asks) ask.rentable = false;
    await waitFor("the wait for a bid", async () => (await eventsOf(url, "dry")).find(isWait), 10_000);
    const sequence = await instanceSequence();
    await sleep(10 * RECHECK_MS);
    const row = await controlRow("dry");
    expect(row).toMatchObject({ mix_failures: 0, launch_failures: 0 });
    expect(row.next_mix_at!.getTime() - Date.now()).toBeLessThanOrEqual(RECHECK_MS);
    expect(await instanceSequence()).toBe(sequence);
    const events = await eventsOf(url, "dry");
    expect(events.filter(isWait)).toHaveLength(1);
    expect(events.map((e) => e.kind)).not.toContain("launch_failed");

    // The market is back with cheap bids: the return starts within one recheck.
    for (const [i, ask] of svc.vast.asks.entries()) ask.rentable = rentable[i]!;
    priceBidsAt(0.8, cost);
    const backAt = Date.now();
    const launched = await waitFor(
      "the bid launched to take the fallback's place",
      async () => (await eventsOf(url, "dry")).find((e) => e.kind === "launched" && e.detail.includes(`to take ${fallback}'s place`)),
      30_000,
    );
    const waitMs = Date.parse(launched.at) - backAt;
    console.log(`bids back at 80% after ${10 * RECHECK_MS} ms with no offer at all (recheck every ${RECHECK_MS} ms): the bid launched +${waitMs} ms`);
    expect(waitMs).toBeLessThanOrEqual(RECHECK_MS + 2000);
    await waitForEndpoint(url, "dry", "the bid ready, the fallback gone", (e) => readyBids(e).length === 1 && instancesOf(e).length === 1, 30_000);
    await deleteAndWait(url, "dry", svc.db.knex);
  }, 120_000);

  it("backs a returned bid that dies before it is ready off on the moves' backoff, not the launches'; a PATCH of capacity and a converged mix start it over", async () => {
    const url = svc.server.url;
    await createEndpoint(url, { name: "patched", template_name: "budget", replicas: 1, max_cost_per_hour: 5, capacity: CAPACITY });
    const { fallback, cost } = await onFallback("patched");
    await waitFor("the wait for a bid", async () => (await eventsOf(url, "patched")).find(isWait), 10_000);

    // Bids turn cheap, and the returned bid's container fails to start: a failed move.
    svc.vast.failNextStart();
    priceBidsAt(0.8, cost);
    const died = await waitFor("the returned bid failed before it was ready", async () => (await eventsOf(url, "patched")).find((e) => e.kind === "launch_failed"), 30_000);
    const move = (await eventsOf(url, "patched")).find((e) => e.kind === "launched" && e.detail.includes(`to take ${fallback}'s place`))!;
    expect(died.instance_id).toBe(move.instance_id);
    expect(died.detail).toContain("next move of the mix in 10 s");
    const failed = await controlRow("patched");
    expect(failed).toMatchObject({ mix_failures: 1, launch_failures: 0 });
    expect(failed.next_mix_at!.getTime()).toBeGreaterThan(Date.now());
    const fallbackStill = await getState("patched");
    expect(readyOnDemand(fallbackStill).map((i) => i.instance_id)).toEqual([fallback]);

    // A PATCH of capacity starts the moves' backoff over: the return goes at once, not in 10 s.
    svc.vast.failNextStart(); // and fails again: the count starts from the first step
    const patchedAt = Date.now();
    expect((await rest(url, "PATCH", "/api/gpu/endpoints/patched", { capacity: { ...CAPACITY, bid_margin: 0.2 } })).status).toBe(200);
    expect(await controlRow("patched")).toMatchObject({ mix_failures: 0, next_mix_at: null, mix_wait_since: null });
    const launchedAfterPatch = await waitFor(
      "a bid launched after the PATCH",
      async () => (await eventsOf(url, "patched")).find((e) => e.kind === "launched" && Date.parse(e.at) >= patchedAt),
      10_000,
    );
    const patchWaitMs = Date.parse(launchedAfterPatch.at) - patchedAt;
    console.log(`after the PATCH of capacity (a failed move had set the next one 10 s away): the bid launched +${patchWaitMs} ms`);
    expect(patchWaitMs).toBeLessThan(5_000);
    await waitFor(
      "the second returned bid ended",
      async () => ((await eventsOf(url, "patched")).filter((e) => e.kind === "launch_failed").length === 2 ? true : undefined),
      30_000,
    );
    expect(await controlRow("patched")).toMatchObject({ mix_failures: 1, launch_failures: 0 });

    // After the 10 s backoff the next return rents, and once the mix converged its count is 0 again.
    await waitForEndpoint(url, "patched", "the bid ready, the fallback gone", (e) => readyBids(e).length === 1 && instancesOf(e).length === 1, 40_000);
    await waitFor("the mix settled", async () => ((await controlRow("patched")).mix_failures === 0 ? true : undefined), 10_000);
    expect(await controlRow("patched")).toMatchObject({ mix_failures: 0, launch_failures: 0, next_mix_at: null, mix_wait_since: null });
    await deleteAndWait(url, "patched", svc.db.knex);
  }, 150_000);
});

async function getState(name: string): Promise<EndpointJson> {
  return waitForEndpoint(svc.server.url, name, "read", () => true, 5_000);
}

import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConflictError, InvalidInputError, NotFoundError } from "../../../../src/errors.js";
import type { CreateMarketInstanceRequest, Marketplace } from "../../../../src/gpu/marketplace/port.js";
import { adapterOn } from "../../../support/vastai/adapter.js";
import { bidTotal, dphTotal, storagePerHour } from "../../../support/vastai/catalogue.js";
import { startVastEmulator, type VastEmulator } from "../../../support/vastai/emulator.js";
import { waitFor } from "../../../support/wait.js";

// vast.ai's interruptible instances on the emulator: the bid market's search, a create that bids,
// a bid vast.ai does not take (yet names the stopped instance it left), an outbid instance in both
// of the ways vast.ai shows it, and a change of bid.

const API_KEY = "vast-bid-key-0123456789";
let vast: VastEmulator;
let market: Marketplace;

beforeEach(async () => {
  vast = await startVastEmulator({ apiKey: API_KEY, provisioningMs: 50, loadingMs: 50 });
  market = adapterOn(vast, API_KEY, { retries: 2 });
});

afterEach(async () => {
  await market.close();
  await vast.close();
});

const request = (offerId: string, label: string, extra: Partial<CreateMarketInstanceRequest> = {}): CreateMarketInstanceRequest => ({
  offerId,
  label,
  image: "pytorch/pytorch:latest",
  diskGb: 20,
  startCommand: "",
  env: {},
  ...extra,
});

const rentable = (gpu = "RTX 3090") => vast.asks.find((a) => a.gpu_name === gpu && a.rentable && a.verified && vast.isRentable(a.id))!;
const calls = (method: string, path: RegExp) => vast.requests.filter((r) => r.method === method && path.test(r.path));

async function statusOf(id: string): Promise<string | undefined> {
  return (await market.getInstance(id))?.status;
}

describe("vast.ai bids", () => {
  it("says it rents interruptible machines", () => {
    expect(market.interruptible).toBe(true);
  });

  it("searches the bid market with type bid, bounded and ordered by min_bid, and prices each offer at its min_bid plus storage", async () => {
    const offers = await market.searchOffers({ interruptible: true, gpuName: "3090", maxPrice: 0.5, rentable: true, order: "price", diskGb: 20 });
    const [search] = calls("POST", /^\/api\/v0\/bundles\/$/);
    expect(search!.body).toMatchObject({ type: "bid", min_bid: { lte: 0.5 }, order: [["min_bid", "asc"]], allocated_storage: 20 });
    expect(search!.body).not.toHaveProperty("dph_total");
    expect(offers.length).toBeGreaterThan(0);
    for (const offer of offers) {
      const ask = vast.asks.find((a) => String(a.id) === offer.id)!;
      expect(offer.minBid).toBe(ask.min_bid);
      expect(offer.storagePerHour).toBe(storagePerHour(ask, 20));
      expect(offer.dphTotal).toBe(bidTotal(ask, ask.min_bid, 20));
      expect(offer.dphTotal).toBeLessThanOrEqual(0.5);
      expect(offer.machineId).toBe(String(ask.machine_id));
    }
    expect(offers.map((o) => o.minBid)).toEqual(offers.map((o) => o.minBid).sort((a, b) => a! - b!));
  });

  it("leaves on-demand searches as they were: type on-demand, dph_total", async () => {
    await market.searchOffers({ maxPrice: 0.5, diskGb: 20 });
    expect(calls("POST", /bundles/)[0]!.body).toMatchObject({ type: "on-demand", dph_total: { lte: 0.5 } });
  });

  it("bids with price on PUT /api/v0/asks/{id}/; the instance is interruptible, billed the bid plus storage", async () => {
    const ask = rentable();
    const bid = Math.round(ask.min_bid * 1.25 * 10_000) / 10_000;
    const created = await market.createInstance(request(String(ask.id), "d1/gpu-1", { bidPerHour: bid }));
    const [put] = calls("PUT", /^\/api\/v0\/asks\/\d+\/$/);
    expect(put!.body).toMatchObject({ client_id: "me", price: bid, disk: 20, cancel_unavail: true });
    expect(created).toMatchObject({ interruptible: true, bidPerHour: bid, dphTotal: bidTotal(ask, bid, 20), machineId: String(ask.machine_id) });
    const shown = await market.getInstance(created.id);
    expect(shown).toMatchObject({ interruptible: true, dphTotal: bidTotal(ask, bid, 20) });
  });

  it("sends no price for an on-demand create, whose instance is not interruptible", async () => {
    const ask = rentable();
    const created = await market.createInstance(request(String(ask.id), "d1/gpu-2"));
    expect(calls("PUT", /asks/)[0]!.body).not.toHaveProperty("price");
    expect(created).toMatchObject({ interruptible: false, dphTotal: dphTotal(ask, 20) });
    expect(created.bidPerHour).toBeUndefined();
  });

  it("destroys the stopped instance an under-bid create still names, and fails the create clearly (the offer is taken)", async () => {
    const ask = rentable();
    const [offer] = await market.searchOffers({ interruptible: true, offerId: String(ask.id), diskGb: 20 });
    ask.min_bid = offer!.minBid! * 2; // outbid between the search and the create
    const err = await market.createInstance(request(String(ask.id), "d1/gpu-3", { bidPerHour: offer!.minBid! })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConflictError);
    expect((err as ConflictError).extra?.field).toBe("offer_id");
    expect((err as Error).message).toMatch(/did not take the bid .*stopped instance \d+ .*destroyed/);
    const [destroy] = calls("DELETE", /^\/api\/v0\/instances\/\d+\/$/);
    expect(destroy?.status).toBe(200);
    expect(vast.instances.size).toBe(0);
  });

  it("reports an outbid instance as preempted, whether actual_status says stopped or the three states do", async () => {
    const a = await market.createInstance(request(String(rentable().id), "d1/gpu-4", { bidPerHour: 1 }));
    const b = await market.createInstance(request(String(rentable().id), "d1/gpu-5", { bidPerHour: 1 }));
    await waitFor(async () => (await statusOf(a.id)) === "running" && (await statusOf(b.id)) === "running", "both running", 3000);
    vast.outbid(Number(a.id), "actual_status");
    vast.outbid(Number(b.id), "states");
    expect(await statusOf(a.id)).toBe("preempted");
    expect(await statusOf(b.id)).toBe("preempted");
    const listed = await market.listInstances("d1/");
    expect(listed.map((i) => i.status)).toEqual(["preempted", "preempted"]);
  });

  it("keeps an exited bid exited, and an on-demand instance stopped by its owner exited, not preempted", async () => {
    const bid = await market.createInstance(request(String(rentable().id), "d1/gpu-6", { bidPerHour: 1 }));
    const onDemand = await market.createInstance(request(String(rentable().id), "d1/gpu-7"));
    await waitFor(async () => (await statusOf(bid.id)) === "running" && (await statusOf(onDemand.id)) === "running", "both running", 3000);
    vast.setStatus(Number(bid.id), "exited");
    vast.setStatus(Number(onDemand.id), "exited");
    expect(await statusOf(bid.id)).toBe("exited");
    expect(await statusOf(onDemand.id)).toBe("exited");
  });

  it("changes a bid with PUT /api/v0/instances/bid_price/{id}/; a bid raised back over min_bid resumes", async () => {
    const ask = rentable();
    const created = await market.createInstance(request(String(ask.id), "d1/gpu-8", { bidPerHour: ask.min_bid }));
    await waitFor(async () => (await statusOf(created.id)) === "running", "running", 3000);
    vast.outbid(Number(created.id));
    ask.min_bid *= 1.5;
    expect(await statusOf(created.id)).toBe("preempted");
    await market.changeBid!(created.id, ask.min_bid);
    const [change] = calls("PUT", /^\/api\/v0\/instances\/bid_price\/\d+\/$/);
    expect(change!.body).toEqual({ client_id: "me", price: ask.min_bid });
    expect(await statusOf(created.id)).toBe("running");
    expect((await market.getInstance(created.id))!.dphTotal).toBe(bidTotal(ask, ask.min_bid, 20));
  });

  it("refuses a change of bid as vast.ai does: 404 no_such_instance is not found, 400 invalid_args a clear invalid input", async () => {
    await expect(market.changeBid!("987654", 0.5)).rejects.toBeInstanceOf(NotFoundError);
    const ask = rentable();
    const bid = await market.createInstance(request(String(ask.id), "d1/gpu-9", { bidPerHour: ask.min_bid }));
    await expect(market.changeBid!(bid.id, 0)).rejects.toThrow(InvalidInputError);
    await expect(market.changeBid!(bid.id, 0)).rejects.toThrow(/vast\.ai refused the bid of \$0\/h: Please set a bid price >= 0\.001\./);
    const onDemand = await market.createInstance(request(String(rentable("RTX 4090").id), "d1/gpu-10"));
    await expect(market.changeBid!(onDemand.id, 0.5)).rejects.toThrow(/is not an interruptible instance/);
    // Each refusal was one request: a 4xx is not retried.
    expect(calls("PUT", /^\/api\/v0\/instances\/bid_price\/\d+\/$/).length).toBe(4);
    expect((await market.getInstance(bid.id))!.dphTotal).toBe(bidTotal(ask, ask.min_bid, 20));
  });
});

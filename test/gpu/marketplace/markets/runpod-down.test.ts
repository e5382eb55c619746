import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startVastRunpodService, type VastRunpodService } from "../../../support/markets/vast-and-runpod.js";
import { rest, waitFor } from "../../helpers.js";
import { marketsApi, type MarketAnswer, type Offer } from "./markets-api.js";

// MARKETPLACE=vastai,runpod with RunPod down, on a service of its own so that no search before
// has filled the RunPod catalogue's cache (a minute-old catalogue would answer for it): RunPod
// answering 5xx, then not answering at all. Searches answer with vast.ai's offers within
// MARKETPLACE_TIMEOUT_MS and say RunPod failed; RunPod's instances keep their stored status
// through the sync rounds; GET /api/gpu/markets says RunPod is failing.

let service: VastRunpodService;
const { url, market: marketOf, record } = marketsApi(() => service);
const statusIs = (id: string, status: string) => async () => ((await record(id)).status === status ? true : undefined);

beforeAll(async () => {
  service = await startVastRunpodService({ GPU_STATUS_SYNC_MS: "100" });
});

afterAll(async () => {
  await service?.close();
  expect(service.runpod.breaches).toEqual([]);
});

describe("MARKETPLACE=vastai,runpod with RunPod down", () => {
  it("answers searches with vast.ai's offers while RunPod fails and hangs, and keeps RunPod's instances as stored", async () => {
    const created = await rest<{ instance_id: string }>(url(), "POST", "/api/gpu/instances", { offer_id: "runpod:community-1x-NVIDIA_GeForce_RTX_4090", template_name: "budget" });
    expect(created.status).toBe(200);
    const id = created.body.instance_id;
    await waitFor("running_llm on RunPod", statusIs(id, "running_llm"), 20_000);
    const lists = (status?: number) => service.runpod.requests.filter((r) => r.method === "GET" && r.path === "/v2/pods" && (status === undefined || r.status === status)).length;

    // 5xx: the search answers with vast.ai's offers and says RunPod failed.
    service.runpod.failNext(1_000_000, 503);
    const failing = await rest<{ offers: Offer[]; markets: MarketAnswer[] }>(url(), "POST", "/api/gpu/search-offers", { limit: 1000 });
    expect(failing.status).toBe(200);
    expect(failing.body.offers.length).toBeGreaterThan(0);
    expect(failing.body.offers.every((o) => o.market === "vastai")).toBe(true);
    expect(failing.body.markets).toEqual([
      { market: "vastai", ok: true, offers: failing.body.offers.length },
      // The adapter retries a read answered 5xx (MARKETPLACE_RETRIES, with backoff), so RunPod's
      // 503s may outlast the search's 1500 ms for it: either is RunPod failing, named.
      { market: "runpod", ok: false, offers: 0, error: expect.stringMatching(/RunPod.*HTTP 503|'runpod' did not answer within 1500 ms/) },
    ]);
    const before = lists(503);
    await waitFor("three sync rounds with RunPod answering 503", async () => (lists(503) >= before + 3 ? true : undefined), 20_000);
    expect(await record(id)).toMatchObject({ status: "running_llm", destroyed_at: null });
    // The last call's failure: RunPod's 503 after the read's retries, or the market's timeout when
    // the retries' backoff outlasted MARKETPLACE_TIMEOUT_MS (which comes first depends on timing).
    expect(await marketOf("runpod")).toMatchObject({ state: "failing", error: expect.stringMatching(/HTTP 503|did not answer within 1500 ms/) });
    expect((await marketOf("runpod")).instances.map((i) => i.instance_id)).toContain(id);
    expect(await marketOf("vastai")).toMatchObject({ state: "ok" });

    // No answer at all: the search costs at most MARKETPLACE_TIMEOUT_MS (1500 ms) for RunPod.
    service.runpod.failNext(0, 503);
    service.runpod.delay(30_000);
    const asked = Date.now();
    const hanging = await rest<{ offers: Offer[]; markets: MarketAnswer[] }>(url(), "POST", "/api/gpu/search-offers", { limit: 1000 });
    const elapsed = Date.now() - asked;
    console.log(`search with RunPod hanging (MARKETPLACE_TIMEOUT_MS=1500): answered in ${elapsed} ms`);
    expect(hanging.status).toBe(200);
    expect(hanging.body.offers.length).toBeGreaterThan(0);
    expect(hanging.body.offers.every((o) => o.market === "vastai")).toBe(true);
    expect(hanging.body.markets[1]).toMatchObject({ market: "runpod", ok: false, error: expect.stringMatching(/(RunPod is unavailable: no|'runpod' did not) answer within 1500 ms/) });
    expect(elapsed).toBeLessThan(8_000); // a generous bound under load, far below the 30 s hang
    const hungFrom = service.runpod.requests.length;
    await waitFor("two sync rounds asking a hanging RunPod", async () => (service.runpod.requests.slice(hungFrom).filter((r) => r.path === "/v2/pods").length >= 2 ? true : undefined), 20_000);
    await new Promise((resolve) => setTimeout(resolve, 3_000)); // past the timeout of the rounds that asked
    expect(await record(id)).toMatchObject({ status: "running_llm", destroyed_at: null });
    expect(await marketOf("runpod")).toMatchObject({ state: "failing" });

    // Back: RunPod is followed again.
    service.runpod.delay(0);
    await waitFor("runpod ok again", async () => ((await marketOf("runpod")).state === "ok" ? true : undefined), 20_000);
    expect((await rest(url(), "DELETE", `/api/gpu/instances/${id}`)).status).toBe(200);
  });

});

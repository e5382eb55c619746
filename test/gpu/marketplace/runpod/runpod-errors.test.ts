import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ConflictError, MarketBlockedError, OperationFailedError, OutcomeUnknownError, UnavailableError } from "../../../../src/errors.js";
import { createSeveralMarkets } from "../../../../src/gpu/marketplace/markets/several-markets.js";
import type { Marketplace } from "../../../../src/gpu/marketplace/port.js";
import type { RunpodMarketplaceOptions } from "../../../../src/gpu/marketplace/runpod/runpod.js";
import { llmRequest, runpodOn } from "../../../support/runpod/adapter.js";
import { NO_CAPACITY, startRunpodEmulator, type RunpodEmulator } from "../../../support/runpod/emulator.js";

const API_KEY = "rpa_test_key_0123456789";
const OFFER = "secure-1x-NVIDIA_GeForce_RTX_4090";

let runpod: RunpodEmulator;
let market: Marketplace;

const connect = (options: Partial<RunpodMarketplaceOptions> = {}) => runpodOn(runpod, API_KEY, options);
const creates = () => runpod.requests.filter((r) => r.method === "POST" && r.path === "/v2/pods");
const podsNamed = (name: string) => [...runpod.pods.values()].filter((p) => p.name === name);

beforeEach(async () => {
  runpod = await startRunpodEmulator({ apiKey: API_KEY });
  market = connect();
  // The catalogue is read before a create; these tests are about the create itself.
  await market.searchOffers({ offerId: OFFER });
});

afterEach(async () => {
  await market.close();
  await runpod.close();
  expect(runpod.breaches).toEqual([]);
});

describe("a RunPod create refused", () => {
  it("for want of capacity (400) is a taken offer, in RunPod's words: the creation moves on", async () => {
    runpod.setStock("NVIDIA GeForce RTX 4090", "SECURE", "NONE");
    const refused = market.createInstance(llmRequest(OFFER, "gpu-n1"));
    await expect(refused).rejects.toThrow(ConflictError);
    await expect(refused).rejects.toThrow(NO_CAPACITY);
    expect(creates()).toHaveLength(1);
    expect(market.health!().state).toBe("ok");
  });

  it("for a pool the account cannot use (403) is a taken offer too", async () => {
    runpod.refuseNextCreate(403);
    await expect(market.createInstance(llmRequest(OFFER, "gpu-n2"))).rejects.toThrow(ConflictError);
    expect(creates()).toHaveLength(1);
  });

  it("as not matching the contract (422) is never sent again, and names RunPod's message", async () => {
    runpod.failNext(1, 422);
    const refused = market.createInstance(llmRequest(OFFER, "gpu-n3"));
    await expect(refused).rejects.toThrow(OperationFailedError);
    await expect(refused).rejects.toThrow(/RunPod refused the pod's description \(HTTP 422\): request refused/);
    expect(creates()).toHaveLength(1);
    expect(runpod.pods.size).toBe(0);
  });

  it.each([
    // No balance is the market's state (503); a refused key a configuration error naming its variable (500), as vast.ai's.
    [402, /lack of balance/, MarketBlockedError],
    [401, /refused the API key.*RUNPOD_API_KEY/, OperationFailedError],
  ] as const)("with %i blocks the market until a create succeeds, letting one probe a minute through", async (status, why, Refusal) => {
    let now = 1_000_000;
    const markets = createSeveralMarkets({ markets: [{ name: "runpod", marketplace: market }], timeoutMs: 5_000, logger: pino({ level: "silent" }), now: () => now });
    const health = () => markets.markets.states()[0]!.health;
    runpod.refuseNextCreate(status);
    await expect(markets.createInstance(llmRequest(OFFER, "gpu-b1"))).rejects.toThrow(Refusal);
    expect(health()).toMatchObject({ state: "blocked", error: expect.stringMatching(why), since: expect.any(Date) });
    // The adapter reports only its transport: the blocked state and its probe clock are kept in one place.
    expect(market.health!().state).toBe("ok");

    // Refused at once, RunPod not asked: the market's own refusal again.
    await expect(markets.createInstance(llmRequest(OFFER, "gpu-b2"))).rejects.toThrow(Refusal);
    expect(creates()).toHaveLength(1);

    // A minute on, one create goes through as a probe; it succeeds and the market is ok again.
    now += 61_000;
    const probe = await markets.createInstance(llmRequest(OFFER, "gpu-b3"));
    expect(probe.label).toBe("gpu-b3");
    expect(creates()).toHaveLength(2);
    expect(health().state).toBe("ok");
  });
});

describe("a RunPod create whose answer is lost", () => {
  it.each([502, 501, 505, 520, 524, "drop"] as const)("answered %s after renting, finds the pod by its name and adopts it: one pod, one create", async (answer) => {
    runpod.failCreatesAfterRenting(1, answer);
    const adopted = await market.createInstance(llmRequest(OFFER, "gpu-l1"));
    expect(adopted).toMatchObject({ label: "gpu-l1", offerId: OFFER, gpuName: "RTX 4090" });
    expect(podsNamed("gpu-l1").map((p) => p.id)).toEqual([adopted.id]);
    expect(creates()).toHaveLength(1);
    // Looked up by name before anything else.
    const afterCreate = runpod.requests.slice(runpod.requests.indexOf(creates()[0]!) + 1);
    expect(afterCreate[0]).toMatchObject({ method: "GET", path: "/v2/pods" });
  });

  it("answered with a 4xx nobody documented, looks the pod up too: its outcome is not known", async () => {
    runpod.failCreatesAfterRenting(1, 409);
    const adopted = await market.createInstance(llmRequest(OFFER, "gpu-l0"));
    expect(podsNamed("gpu-l0").map((p) => p.id)).toEqual([adopted.id]);
    expect(creates()).toHaveLength(1);
  });

  it("with no answer at all (past the timeout), adopts the pod it rented", async () => {
    market = connect({ timeoutMs: 300 });
    runpod.answerCreatesAfter(1000);
    const adopted = await market.createInstance(llmRequest(OFFER, "gpu-l2"));
    expect(podsNamed("gpu-l2").map((p) => p.id)).toEqual([adopted.id]);
    expect(creates()).toHaveLength(1);
  });

  it.each([503, 524])("answered %s without renting, is sent again on the same offer: one pod", async (status) => {
    runpod.failNext(1, status);
    // The failure lands on the create (the catalogue is cached), then the lookup finds nothing.
    const created = await market.createInstance(llmRequest(OFFER, "gpu-l3"));
    expect(creates()).toHaveLength(2);
    expect(creates().every((r) => (r.body as { gpu: { id: string } }).gpu.id === "NVIDIA GeForce RTX 4090")).toBe(true);
    expect(podsNamed("gpu-l3").map((p) => p.id)).toEqual([created.id]);
  });

  it("looks for the pod for its lookup time before sending again: a pod listed late is adopted, not rented twice", async () => {
    market = connect({ createLookupMs: 1500 });
    runpod.failCreatesAfterRenting(1, 524);
    runpod.listLag(500);
    const adopted = await market.createInstance(llmRequest(OFFER, "gpu-l4"));
    expect(creates()).toHaveLength(1);
    expect(podsNamed("gpu-l4").map((p) => p.id)).toEqual([adopted.id]);
  });

  it("still unknown after two more tries, is an unknown outcome; the adapter deletes nothing, the twins are the database's to settle", async () => {
    runpod.listLag(60_000);
    runpod.failCreatesAfterRenting(3, 500);
    const lost = market.createInstance(llmRequest(OFFER, "gpu-l5"));
    await expect(lost).rejects.toThrow(OutcomeUnknownError);
    await expect(lost).rejects.toThrow(/nothing labelled gpu-l5 is listed after 3 attempts/);
    expect(creates()).toHaveLength(3);
    runpod.listLag(0);
    expect(await market.listInstances("gpu-")).toHaveLength(3);
    expect(runpod.requests.some((r) => r.method === "DELETE")).toBe(false);
  });

  it("then refused on the next try, stays unknown: the refusal says nothing of the pod the first try may have rented", async () => {
    runpod.listLag(60_000);
    runpod.failCreatesAfterRenting(1, 500);
    // The stock runs out between the first create and the second.
    runpod.onCreate(() => creates().length === 2 && runpod.setStock("NVIDIA GeForce RTX 4090", "SECURE", "NONE"));
    const lost = market.createInstance(llmRequest(OFFER, "gpu-l6"));
    await expect(lost).rejects.toThrow(OutcomeUnknownError);
    await expect(lost).rejects.toThrow(/sent again was refused/);
    expect(podsNamed("gpu-l6")).toHaveLength(1);
  });
});

describe("RunPod unreachable or unreadable", () => {
  it("a hang costs the timeout per attempt and answers unavailable, and the market says failing", async () => {
    market = connect({ timeoutMs: 200, retries: 1 });
    runpod.delay(1000);
    const started = Date.now();
    await expect(market.listInstances("gpu-")).rejects.toThrow(UnavailableError);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(market.health!()).toMatchObject({ state: "failing", error: expect.stringContaining("RunPod is unavailable"), since: expect.any(Date) });
    runpod.delay(0);
    await market.listInstances("gpu-");
    expect(market.health!().state).toBe("ok");
  });

  it("a 5xx on a read is retried, then answers", async () => {
    runpod.failNext(2, 503);
    expect(await market.listInstances("gpu-")).toEqual([]);
  });

  it("a pod without the fields the adapter needs fails the read with 503 naming RunPod: nothing read as gone, nothing deleted", async () => {
    const created = await market.createInstance(llmRequest(OFFER, "gpu-u1"));
    runpod.corruptNext(2);
    const list = market.listInstances("gpu-");
    await expect(list).rejects.toThrow(UnavailableError);
    await expect(list).rejects.toThrow(/RunPod sent a malformed answer: pods\[0\]\.cost is not a number/);
    await expect(market.getInstance(created.id)).rejects.toThrow(UnavailableError);
    expect(market.health!().state).toBe("failing");
    expect(runpod.pods.has(created.id)).toBe(true);
    expect(runpod.requests.some((r) => r.method === "DELETE")).toBe(false);
  });

  it("a 404 that is not RunPod's (a wrong URL, a proxy's page) is not read as gone", async () => {
    const proxy = createServer((_req, res) => res.writeHead(404, { "content-type": "text/html" }).end("<html><body>Not Found</body></html>"));
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const elsewhere = runpodOn(runpod, API_KEY, { baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}` });
    try {
      await expect(elsewhere.getInstance("rp00000001")).rejects.toThrow(/RunPod did not show pod rp00000001 \(HTTP 404\)/);
      await expect(elsewhere.destroyInstance("rp00000001")).rejects.toThrow(/HTTP 404/);
    } finally {
      await elsewhere.close();
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  it("a refused key on a read blocks the market and says so", async () => {
    const wrong = createSeveralMarkets({ markets: [{ name: "runpod", marketplace: runpodOn(runpod, "rpa_wrong_key") }], timeoutMs: 5_000, logger: pino({ level: "silent" }) });
    const refused = await wrong.listInstances("gpu-").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(OperationFailedError);
    expect((refused as OperationFailedError).extra).toMatchObject({ code: "MARKETPLACE_AUTH_REFUSED" });
    expect(wrong.markets.states()[0]!.health).toMatchObject({ state: "blocked", error: expect.stringContaining("RUNPOD_API_KEY") });
    await wrong.close();
  });
});

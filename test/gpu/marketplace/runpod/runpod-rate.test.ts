import { afterEach, describe, expect, it } from "vitest";
import { UnavailableError } from "../../../../src/errors.js";
import type { Marketplace } from "../../../../src/gpu/marketplace/port.js";
import { runpodOn } from "../../../support/runpod/adapter.js";
import { startRunpodEmulator, type RunpodEmulator } from "../../../support/runpod/emulator.js";
import { waitFor } from "../../../support/wait.js";

const API_KEY = "rpa_test_key_0123456789";

let runpod: RunpodEmulator;
let market: Marketplace;

afterEach(async () => {
  await market.close();
  await runpod.close();
  expect(runpod.breaches).toEqual([]);
});

async function start(quota?: number, windowS?: number): Promise<void> {
  runpod = await startRunpodEmulator({ apiKey: API_KEY, quota, windowS });
  market = runpodOn(runpod, API_KEY);
}

describe("RunPod's rate limits", () => {
  it("a 429 pauses every call with the key until its Retry-After has passed, and the market says rate limited meanwhile", async () => {
    await start();
    runpod.throttle(1, 2);
    const first = market.listInstances("gpu-");
    await waitFor(() => market.health!().state === "rate_limited", "the market rate limited", 5000);
    expect(market.health!().until).toBeInstanceOf(Date);
    const second = market.getInstance("rp00000099");
    expect(await first).toEqual([]);
    expect(await second).toBeUndefined();

    const [throttled, ...after] = runpod.requests;
    expect(throttled!.status).toBe(429);
    expect(after).toHaveLength(2);
    // Nothing reached RunPod before the second was up (a little slack for the clocks' rounding).
    for (const request of after) expect(request.at - throttled!.at).toBeGreaterThanOrEqual(1950);
    expect(market.health!().state).toBe("ok");
    // Counted for the market's metrics: the 429 waited out by the first call, the pause by the second.
    const waits = market.rateLimitWaits!();
    expect(waits.count).toBeGreaterThanOrEqual(2);
    expect(waits.seconds).toBeGreaterThanOrEqual(1.9);
  });

  it("a Retry-After longer than a call may wait answers 503 at once, and later calls too without asking RunPod", async () => {
    await start();
    runpod.throttle(1, 120);
    await expect(market.listInstances("gpu-")).rejects.toThrow(UnavailableError);
    expect(market.health!()).toMatchObject({ state: "rate_limited" });
    expect(market.health!().until!.getTime() - Date.now()).toBeGreaterThan(100_000);
    await expect(market.listInstances("gpu-")).rejects.toThrow(/rate limited: it asked to wait until/);
    expect(runpod.requests).toHaveLength(1);
  });

  it("RateLimit-Policy's quota is kept: a burst past it is spaced into the next window instead of answered 429", async () => {
    await start(6, 2);
    await market.listInstances("gpu-");
    const started = Date.now();
    const burst = await Promise.all(Array.from({ length: 10 }, () => market.listInstances("gpu-")));
    expect(burst).toHaveLength(10);
    expect(runpod.requests.map((r) => r.status)).toEqual(Array(11).fill(200));
    // 11 calls at 6 per 2 s cannot all fit in the first window.
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    expect(market.rateLimitWaits!().count).toBeGreaterThanOrEqual(4);
  });

  it("a cold burst waits for RunPod's first answer to learn the quota, and overruns nothing", async () => {
    await start(6, 2);
    // Sent at once, 8 calls would overrun a quota of 6 (the test below shows RunPod's answer to that).
    const burst = await Promise.allSettled(Array.from({ length: 8 }, () => market.listInstances("gpu-")));
    expect(burst.every((outcome) => outcome.status === "fulfilled")).toBe(true);
    expect(runpod.requests.map((r) => r.status)).toEqual(Array(8).fill(200));
  });

  it("without the spacing the same burst meets RunPod's 429 (the test above can fail)", async () => {
    await start(6, 60);
    const raw = await Promise.all(
      Array.from({ length: 11 }, () => fetch(`${runpod.url}/v2/pods`, { headers: { authorization: `Bearer ${API_KEY}` } }).then((r) => r.status)),
    );
    expect(raw.filter((status) => status === 429).length).toBeGreaterThan(0);
    market = runpodOn(runpod, API_KEY);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QUICK_MARKET_ENV, startMarketService, type MarketService } from "../../../support/markets/market-service.js";
import { createEndpoint, eventsOf, FAST_ENDPOINT_ENV } from "../../endpoints/helpers.js";
import { rest, waitFor } from "../../helpers.js";

// With one market configured and it refusing the account, an automatic pick answers the market's
// refusal, never 404 "no rentable offer" (the market left out of the pick as blocked): a refused
// key the 500 naming its variable, no balance or a failing market a 503 naming the market and why.
// Each market alone on its emulator, on the real PostgreSQL; every pick is made twice, since the
// first refusal blocks the market and the second pick is the one that found no market to ask.

const VAST_KEY = "vast-one-blocked-0123456789";
const RUNPOD_KEY = "rpa_one_blocked_0123456789";
const WRONG_KEY = "not-the-key-at-all";
const ENV = { ...QUICK_MARKET_ENV, ...FAST_ENDPOINT_ENV };

let vastWrongKey: MarketService;
let runpodWrongKey: MarketService;
let vast: MarketService;
let runpod: MarketService;

beforeAll(async () => {
  [vastWrongKey, runpodWrongKey, vast, runpod] = await Promise.all([
    startMarketService({ vast: { apiKey: VAST_KEY }, env: { MARKETPLACE: "vastai", VAST_API_KEY: WRONG_KEY, ...ENV } }),
    startMarketService({ runpod: { apiKey: RUNPOD_KEY }, env: { MARKETPLACE: "runpod", RUNPOD_API_KEY: WRONG_KEY, ...ENV } }),
    startMarketService({ vast: { apiKey: VAST_KEY }, env: { MARKETPLACE: "vastai", ...ENV } }),
    startMarketService({ runpod: { apiKey: RUNPOD_KEY }, env: { MARKETPLACE: "runpod", ...ENV } }),
  ]);
});

afterAll(async () => {
  await Promise.all([vastWrongKey, runpodWrongKey, vast, runpod].map((s) => s?.close()));
});

/** Two automatic picks in a row (POST from-template without offer_id), as REST answers them. */
async function pickTwice(service: MarketService): Promise<Array<{ status: number; detail: string }>> {
  const answers = [];
  for (let i = 0; i < 2; i++) {
    const answer = await rest<{ detail: string }>(service.server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
    answers.push({ status: answer.status, detail: answer.body.detail });
  }
  return answers;
}

async function marketState(service: MarketService): Promise<string> {
  const answer = await rest<{ markets: Array<{ state: string }> }>(service.server.url, "GET", "/api/gpu/markets");
  return answer.body.markets[0]!.state;
}

describe("one market, its key refused", () => {
  it.each([
    ["vast.ai", () => vastWrongKey, /VAST_API_KEY/],
    ["RunPod", () => runpodWrongKey, /RUNPOD_API_KEY/],
  ] as const)("on %s: every automatic pick answers 500 naming the key's variable, never 404", async (_market, service, variable) => {
    for (const answer of await pickTwice(service())) {
      expect(answer.status).toBe(500);
      expect(answer.detail).toMatch(variable);
      expect(answer.detail).not.toContain(WRONG_KEY);
    }
    expect(await marketState(service())).toBe("blocked");
  });

  it("answers an endpoint's launch with the refusal too: its event names VAST_API_KEY", async () => {
    await createEndpoint(vastWrongKey.server.url, { name: "blocked-vast", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const failed = await waitFor(
      "a failed launch",
      async () => (await eventsOf(vastWrongKey.server.url, "blocked-vast")).find((e) => e.kind === "launch_failed"),
      20_000,
    );
    expect(failed.detail).toMatch(/VAST_API_KEY/);
    expect(failed.detail).not.toMatch(/No rentable offer/);
  });
});

describe("one market, failing", () => {
  it.each([
    ["vast.ai", () => vast, (s: MarketService) => s.vast!.failNext(1000, 503), (s: MarketService) => s.vast!.failNext(0, 503), /vast\.ai/],
    ["RunPod", () => runpod, (s: MarketService) => s.runpod!.failNext(1000, 503), (s: MarketService) => s.runpod!.failNext(0, 503), /RunPod/],
  ] as const)("on %s: an automatic pick answers 503 naming the market and why", async (_market, service, fail, mend, named) => {
    fail(service());
    try {
      const answer = await rest<{ detail: string }>(service().server.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
      expect(answer.status).toBe(503);
      expect(answer.body.detail).toMatch(named);
      expect(answer.body.detail).toMatch(/503/);
    } finally {
      mend(service());
    }
  });
});

describe("one market, no balance", () => {
  it("on RunPod (402 to a create): every automatic pick answers 503 naming RunPod and the balance, never 404", async () => {
    runpod.runpod!.refuseNextCreate(402);
    for (const answer of await pickTwice(runpod)) {
      expect(answer.status).toBe(503);
      expect(answer.detail).toMatch(/RunPod refused for lack of balance \(HTTP 402/);
    }
    // Only the first pick reached RunPod's create; the second was answered from the blocked state.
    expect(runpod.runpod!.requests.filter((r) => r.method === "POST" && r.path === "/v2/pods")).toHaveLength(1);
    expect(await marketState(runpod)).toBe("blocked");
    expect(await runpod.db.knex("gpu_instances").whereNotIn("status", ["failed", "destroyed"])).toEqual([]);
  });
});

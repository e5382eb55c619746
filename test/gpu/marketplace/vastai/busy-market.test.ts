import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { VastEmulator } from "../../../support/vastai/emulator.js";
import type { TestDatabase } from "../../../support/postgres.js";
import type { TestServer } from "../../../support/server.js";
import { startVastService, type VastService } from "../../../support/vastai/service.js";
import { rest, waitFor } from "../../helpers.js";

// Six template creates at once against a market that enforces a minimum interval per endpoint as
// vast.ai does (here a tenth of vast.ai's, so that the test takes seconds): a call inside the
// interval answers 429 naming the threshold and extends the lock-out. The service starts below the
// market's intervals (VAST_MIN_INTERVAL_MS=1), learns each endpoint's from its first 429, and ends
// with six machines on six asks, no ask rented twice, nothing failed.

const API_KEY = "vast-busy-key-0123456789";
const CREATES = 6;
const INTERVALS = { search: 600, ask: 450, show: 200, list: 100, destroy: 300 };

let vast: VastEmulator;
let db: TestDatabase;
let service: VastService;
let server: TestServer;

beforeAll(async () => {
  service = await startVastService({ apiKey: API_KEY, provisioningMs: 100, loadingMs: 100, minIntervalMs: INTERVALS }, {
    VAST_MIN_INTERVAL_MS: "1",
    VAST_BACKOFF_MS: "20",
    GPU_STATUS_SYNC_MS: "300",
  });
  ({ vast, db, server } = service);
});

afterAll(async () => {
  await service?.close();
});

describe("a busy vast.ai market", () => {
  it(`rents ${CREATES} concurrent template creates on ${CREATES} asks, each once, within the endpoints' intervals`, async () => {
    const started = Date.now();
    const answers = await Promise.all(
      Array.from({ length: CREATES }, () => rest<{ instance_id: string }>(server.url, "POST", "/api/gpu/instances/from-template?template_name=budget")),
    );
    const elapsed = Date.now() - started;
    expect(answers.map((a) => a.status)).toEqual(Array(CREATES).fill(200));

    const rows = await db.knex("gpu_instances").whereIn("instance_id", answers.map((a) => a.body.instance_id));
    expect(rows.every((r) => r.status !== "failed" && r.market_instance_id !== null)).toBe(true);
    const machines = [...vast.instances.values()];
    expect(machines).toHaveLength(CREATES);
    expect(new Set(machines.map((m) => m.askId)).size).toBe(CREATES); // no ask rented twice
    expect(new Set(rows.map((r) => r.offer_id))).toEqual(new Set(machines.map((m) => String(m.askId))));

    // Each endpoint answered 429 only until the service knew its interval: at most once per create in flight.
    const throttled = vast.requests.filter((r) => r.status === 429);
    const by = (method: string, path: RegExp) => throttled.filter((r) => r.method === method && path.test(r.path)).length;
    const searches429 = by("POST", /bundles/);
    const creates429 = by("PUT", /asks/);
    console.log(`busy market: ${CREATES} creates in ${elapsed} ms; 429s: ${searches429} searches, ${creates429} creates, ${throttled.length} in all`);
    expect(searches429).toBeLessThanOrEqual(CREATES - 1);
    expect(creates429).toBeLessThanOrEqual(CREATES - 1);
    // Creates are spaced by the create interval, not bunched and retried.
    const puts = vast.requests.filter((r) => r.method === "PUT" && r.status === 200).map((r) => r.at);
    for (let i = 1; i < puts.length; i++) expect(puts[i]! - puts[i - 1]!).toBeGreaterThanOrEqual(INTERVALS.ask - 5);
    // The operator sees those waits per market: at least the creates' spacing, in seconds.
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const waits = Number(/gpu_market_rate_limit_waits_total\{market="[^"]+"\} (\d+)/.exec(metrics)?.[1]);
    const waited = Number(/gpu_market_rate_limit_wait_seconds_total\{market="[^"]+"\} ([\d.e-]+)/.exec(metrics)?.[1]);
    expect(waits).toBeGreaterThanOrEqual(CREATES - 1);
    expect(waited).toBeGreaterThanOrEqual(((CREATES - 1) * INTERVALS.ask) / 1000 - 0.05);

    await waitFor("all running", async () => ((await db.knex("gpu_instances").whereIn("status", ["running", "running_llm"])).length === CREATES ? true : undefined), 20_000);
  });
});

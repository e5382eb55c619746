import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EmulatorRequest, VastEmulator } from "../../../support/vastai/emulator.js";
import type { TestDatabase } from "../../../support/postgres.js";
import type { TestServer } from "../../../support/server.js";
import { startVastService, type VastService } from "../../../support/vastai/service.js";
import { rest, waitFor } from "../../helpers.js";

// Request economy (SPEC.md section 2): a sync round costs one marketplace list call for all live
// instances, shared with the reconciler, whatever their number; repeated status reads of one
// instance within a couple of seconds cost one call. Measured against the vast.ai emulator with
// 50 live instances, where one list call is 2 pages of 25.

const API_KEY = "vast-economy-key-0123456789";
const LIVE = 50;
const SYNC_MS = 400;

let vast: VastEmulator;
let db: TestDatabase;
let service: VastService;
let server: TestServer;

beforeAll(async () => {
  service = await startVastService({ apiKey: API_KEY, provisioningMs: 50, loadingMs: 50 }, {
    VAST_MIN_INTERVAL_MS: "0",
    GPU_STATUS_SYNC_MS: String(SYNC_MS),
  });
  ({ vast, db, server } = service);
  const asks = vast.asks.filter((a) => a.verified && vast.isRentable(a.id) && a.reliability2 >= 0.95).slice(0, LIVE);
  for (const ask of asks) {
    const created = await rest(server.url, "POST", "/api/gpu/instances", { offer_id: String(ask.id) });
    expect(created.status).toBe(200);
  }
  await waitFor("every instance running", async () =>
    (await db.knex("gpu_instances").where({ status: "running" })).length === LIVE ? true : undefined,
  20_000);
}, 60_000);

afterAll(async () => {
  await service?.close();
});

const isRoundStart = (r: EmulatorRequest) => r.method === "GET" && r.path === "/api/v1/instances/" && !r.query.get("after_token");

describe("request economy", () => {
  it(`costs at most 2 marketplace calls per sync round with ${LIVE} live instances`, async () => {
    const from = vast.requests.length;
    await new Promise((resolve) => setTimeout(resolve, SYNC_MS * 8));
    const window = vast.requests.slice(from);
    const firstRound = window.findIndex(isRoundStart);
    const lastRound = window.findLastIndex(isRoundStart);
    const rounds = window.filter(isRoundStart).length - 1; // whole rounds between the first and the last start
    expect(rounds).toBeGreaterThanOrEqual(2);
    const calls = lastRound - firstRound;
    const perRound = calls / rounds;
    console.log(`request economy: ${LIVE} live instances, ${rounds} sync rounds, ${calls} vast.ai calls, ${perRound.toFixed(2)} calls per round`);
    expect(perRound).toBeLessThanOrEqual(2);
    expect(window.filter((r) => r.path.startsWith("/api/v0/instances/"))).toEqual([]);
  });

  it("serves repeated status reads of one instance within 2 s from one marketplace answer", async () => {
    const [row] = await db.knex("gpu_instances").where({ status: "running" }).limit(1);
    const shows = () => vast.requests.filter((r) => r.method === "GET" && r.path === `/api/v0/instances/${row.market_instance_id}/`).length;
    const before = shows();
    for (let i = 0; i < 5; i++) {
      expect((await rest(server.url, "GET", `/api/gpu/instances/${row.instance_id}`)).status).toBe(200);
      expect((await rest(server.url, "GET", `/api/gpu/instances/${row.instance_id}/enhanced`)).status).toBe(200);
    }
    expect(shows() - before).toBeLessThanOrEqual(1);
    await new Promise((resolve) => setTimeout(resolve, 2100));
    await rest(server.url, "GET", `/api/gpu/instances/${row.instance_id}`);
    // After 2 s the read may be served by a sync round's listing; it is never older than that.
    expect(shows() - before).toBeLessThanOrEqual(2);
  });
});

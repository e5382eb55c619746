import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LLM_DISK_GB } from "../../../../src/gpu/creation/launch-plan.js";
import { findTemplate } from "../../../../src/gpu/creation/templates.js";
import { dphTotal, fitsTemplate } from "../../../support/vastai/catalogue.js";
import { startVastService, type VastService } from "../../../support/vastai/service.js";
import { gpuClient, rest } from "../../helpers.js";

// Two answers that must name their cause, on REST and Connect, with MARKETPLACE=vastai against
// the emulator: a wrong VAST_API_KEY is a configuration error (500 naming it), not a retryable
// outage (503); and a named offer that exists but has too little disk for the template is a 400
// naming the disk, not "not found".

const API_KEY = "vast-named-causes-key";
let rightKey: VastService;
let wrongKey: VastService;

beforeAll(async () => {
  [rightKey, wrongKey] = await Promise.all([
    startVastService({ apiKey: API_KEY, minIntervalMs: 10 }, { VAST_MIN_INTERVAL_MS: "15", VAST_BACKOFF_MS: "10" }),
    startVastService({ apiKey: API_KEY, minIntervalMs: 10 }, { VAST_API_KEY: "not-the-key", VAST_MIN_INTERVAL_MS: "15", VAST_BACKOFF_MS: "10" }),
  ]);
});

afterAll(async () => {
  await Promise.all([rightKey?.close(), wrongKey?.close()]);
});

describe("a wrong VAST_API_KEY on the offer routes", () => {
  it("answers 500 naming VAST_API_KEY on REST (vast.ai's search answers the key 404 auth_error)", async () => {
    for (const [method, path, body] of [
      ["GET", "/api/gpu/offers", undefined],
      ["POST", "/api/gpu/search-offers", { gpu_name: "4090" }],
    ] as const) {
      const answer = await rest(wrongKey.server.url, method, path, body);
      expect(answer.status, path).toBe(500);
      expect(String(answer.body.detail), path).toMatch(/VAST_API_KEY/);
      expect(JSON.stringify(answer.body)).not.toContain("not-the-key");
    }
    const refused = wrongKey.vast.requests.filter((r) => r.path === "/api/v0/bundles/");
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((r) => r.status === 404)).toBe(true);
  });

  it("answers internal naming VAST_API_KEY on Connect", async () => {
    const client = gpuClient(wrongKey.server.url);
    for (const call of [() => client.listOffers({}), () => client.searchOffers({ gpuName: "4090" })]) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.Internal);
      expect((err as ConnectError).rawMessage).toMatch(/VAST_API_KEY/);
    }
  });

  it("still lists offers with the right key", async () => {
    const answer = await rest<{ offers: unknown[] }>(rightKey.server.url, "GET", "/api/gpu/offers");
    expect(answer.status).toBe(200);
    expect(answer.body.offers.length).toBeGreaterThan(0);
  });
});

describe("a named offer without the disk the template's model needs", () => {
  /** The cheapest ask the budget template could rent, its host now with 78 GB free (the model needs 100). */
  function shortOfDisk() {
    const { vast } = rightKey;
    const ask = vast.asks
      .filter((a) => a.verified && vast.isRentable(a.id) && fitsTemplate(a, findTemplate("budget")!, LLM_DISK_GB))
      .sort((a, b) => dphTotal(a, LLM_DISK_GB) - dphTotal(b, LLM_DISK_GB))[0]!;
    ask.disk_space = 78;
    return ask;
  }

  it("answers 400 naming the disk on REST and Connect, rents nothing and leaves no active record", async () => {
    const ask = shortOfDisk();
    const { db, vast, server } = rightKey;
    const machinesBefore = vast.instances.size;
    const answer = await rest(server.url, "POST", `/api/gpu/instances/from-template?template_name=budget&offer_id=${ask.id}`, {});
    expect(answer.status).toBe(400);
    expect(String(answer.body.detail)).toMatch(new RegExp(`Offer '${ask.id}' has 78 GB of disk free, below the ${LLM_DISK_GB} GB template 'budget' needs`));
    expect(answer.body).toMatchObject({ field: "offer_id", limit: "disk" });

    const err = await gpuClient(server.url)
      .createInstanceFromTemplate({ templateName: "budget", offerId: String(ask.id) })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toMatch(/disk/);

    expect(vast.instances.size).toBe(machinesBefore);
    expect(await db.knex("gpu_instances").whereIn("status", ["creating", "loading", "running", "running_llm"])).toEqual([]);
    // The ask was looked up by its id alone: no disk bound that would hide it.
    const lookups = vast.requests.filter((r) => r.path === "/api/v0/bundles/" && (r.body as { id?: unknown })?.id !== undefined);
    expect(lookups.length).toBeGreaterThan(0);
    expect(lookups.every((r) => (r.body as { disk_space?: unknown }).disk_space === undefined)).toBe(true);
  });
});

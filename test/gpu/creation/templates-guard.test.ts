import { Code, ConnectError } from "@connectrpc/connect";
import { beforeAll, describe, expect, it } from "vitest";
import type { Marketplace, MarketOffer } from "../../../src/gpu/marketplace/port.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createFastSimulatedMarketplace, startTestServer, useTestServer } from "../../support/server.js";
import { gpuClient, rest, templateOffers } from "../helpers.js";

// Templates are cost guards: whatever the caller names, an instance created from a template
// rents an offer with at least its GPU RAM and at most its price, on a machine its model runs on.

const t = useTestServer();
let catalogue: MarketOffer[];

beforeAll(async () => {
  catalogue = await t.server.marketplace.listOffers();
});

const fromTemplate = (query: string, body?: unknown) =>
  rest<Record<string, unknown>>(t.server.url, "POST", `/api/gpu/instances/from-template?${query}`, body);
const instanceCount = async () => Number((await t.db.knex("gpu_instances").count({ n: "*" }))[0]!.n);

describe("creating from a template without an offer", () => {
  it("rents the cheapest rentable offer within the template's RAM floor and price cap", async () => {
    const expected = templateOffers(catalogue, "research")[0]!;
    // Cheaper offers within the RAM floor and price cap exist, but cannot serve the 14B model.
    expect(catalogue.some((o) => o.rentable && o.gpuRam >= 16 && o.dphTotal < expected.dphTotal)).toBe(true);
    const res = await fromTemplate("template_name=research");
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ success: true, template_name: "research", status: "creating" });
    const row = await t.db.knex("gpu_instances").where({ instance_id: res.body.instance_id }).first();
    expect(row.offer_id).toBe(expected.id);
    expect(row.cost_per_hour).toBe(expected.dphTotal);
    expect(row.template_name).toBe("research");
  });
});

describe("creating from a template with an offer", () => {
  it("refuses an offer above the price cap with a 400 naming max_price, and creates nothing", async () => {
    const pricey = catalogue.find((o) => o.rentable && o.gpuRam >= 8 && o.dphTotal > 0.5)!;
    const before = await instanceCount();
    const res = await fromTemplate(`template_name=budget&offer_id=${pricey.id}`);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ limit: "max_price" });
    expect(res.body.detail).toContain("max_price");
    expect(await instanceCount()).toBe(before);
  });

  it("refuses an offer below the GPU RAM floor with a 400 naming min_gpu_ram", async () => {
    const small = catalogue.find((o) => o.rentable && o.gpuRam < 24 && o.dphTotal <= 2)!;
    const res = await rest(t.server.url, "POST", "/api/gpu/instances", { offer_id: small.id, template_name: "high_performance" });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ limit: "min_gpu_ram" });
    expect(res.body.detail).toContain("min_gpu_ram");
  });

  it.each([
    // Within the RAM floor and price cap, but a machine the model cannot run on.
    ["min_total_gpu_ram", "research", (o: MarketOffer) => o.numGpus === 1 && o.gpuRam >= 16 && o.gpuRam < 40 && o.dphTotal <= 1],
    ["min_cuda", "budget", (o: MarketOffer) => o.gpuRam * o.numGpus >= 24 && o.dphTotal <= 0.5 && o.cudaMaxGood! < 12.8 && o.directPortCount! > 0],
    ["direct_port", "budget", (o: MarketOffer) => o.gpuRam * o.numGpus >= 24 && o.dphTotal <= 0.5 && o.cudaMaxGood! >= 12.8 && o.directPortCount === 0],
  ])("refuses a named offer that cannot serve the model with a 400 naming %s, and creates nothing", async (limit, template, unfit) => {
    const offer = catalogue.find((o) => o.rentable && [1, 2, 4].includes(o.numGpus) && unfit(o))!;
    expect(offer).toBeDefined();
    const before = await instanceCount();
    const res = await fromTemplate(`template_name=${template}&offer_id=${offer.id}`);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ limit, field: "offer_id" });
    expect(res.body.detail).toContain(`cannot serve template '${template}'`);
    expect(await instanceCount()).toBe(before);
  });

  it("answers 404 for an unknown offer and 409 for one that is not rentable", async () => {
    expect((await fromTemplate("template_name=budget&offer_id=nope")).status).toBe(404);
    const unrentable = catalogue.find((o) => !o.rentable)!;
    const res = await rest(t.server.url, "POST", "/api/gpu/instances", { offer_id: unrentable.id });
    expect(res.status).toBe(409);
    expect(res.body.detail).toContain(unrentable.id);
  });
});

describe("bad creation requests", () => {
  it("answers 400 for an unknown template on create and 404 on GET", async () => {
    const create = await rest(t.server.url, "POST", "/api/gpu/instances", { template_name: "gigantic" });
    expect(create.status).toBe(400);
    expect(create.body.detail).toContain("Template 'gigantic' not found");
    expect((await fromTemplate("template_name=gigantic")).status).toBe(400);
    expect(await rest(t.server.url, "GET", "/api/gpu/templates/gigantic")).toEqual({
      status: 404,
      body: { detail: "Template 'gigantic' not found" },
    });
  });

  it("answers 400 listing the accepted keys for an unknown custom_config key", async () => {
    const res = await fromTemplate("template_name=budget", { custom_config: { temperature: 0.2 } });
    expect(res.status).toBe(400);
    for (const key of ["llm_max_model_len", "llm_gpu_memory_utilization", "auto_destroy", "temperature"]) {
      expect(res.body.detail).toContain(key);
    }
  });

  it.each([
    [{ llm_max_model_len: 0 }],
    [{ llm_max_model_len: 1.5 }],
    [{ llm_gpu_memory_utilization: 1.2 }],
    [{ llm_gpu_memory_utilization: 0 }],
    [{ auto_destroy: "yes" }],
  ])("answers 400 for custom_config %j", async (customConfig) => {
    const before = await instanceCount();
    expect((await fromTemplate("template_name=budget", { custom_config: customConfig })).status).toBe(400);
    expect(await instanceCount()).toBe(before);
  });

  it("requires offer_id without a template, and template_name on from-template", async () => {
    const res = await rest(t.server.url, "POST", "/api/gpu/instances", {});
    expect(res).toEqual({ status: 400, body: expect.objectContaining({ field: "offer_id" }) });
    expect((await rest(t.server.url, "POST", "/api/gpu/instances/from-template")).status).toBe(400);
  });

  it("answers invalid_argument over the generated client", async () => {
    const err = await gpuClient(t.server.url)
      .createInstanceFromTemplate({ templateName: "budget", body: { customConfig: { colour: "red" } } })
      .catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
  });
});

describe("a catalogue where no offer fits a template", () => {
  it("answers 404 naming the template and its limits", async () => {
    const simulated = createFastSimulatedMarketplace();
    // The real simulated marketplace, holding only its offers above every template's cap.
    const pricey: Marketplace = {
      ...simulated,
      listOffers: async () => (await simulated.listOffers()).filter((o) => o.dphTotal > 2),
      searchOffers: async (filter) => (await simulated.searchOffers({ ...filter, limit: 1000 })).filter((o) => o.dphTotal > 2).slice(0, filter.limit),
    };
    const other = await startTestServer({ knex: t.db.knex, elasticsearch: createTestElasticsearch(), marketplace: pricey });
    try {
      const res = await rest(other.url, "POST", "/api/gpu/instances/from-template?template_name=budget");
      expect(res.status).toBe(404);
      expect(res.body.detail).toBe(
        "No rentable offer matches template 'budget' (min_gpu_ram 8 GB, max_price $0.5/h, min_total_gpu_ram 24 GB, num_gpus in 1/2/4, min_cuda 12.8, a direct port)",
      );
    } finally {
      await other.close();
      await simulated.close();
    }
  });
});

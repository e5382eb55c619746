import { Code, ConnectError } from "@connectrpc/connect";
import { beforeAll, describe, expect, it } from "vitest";
import type { MarketOffer } from "../../src/gpu/marketplace/port.js";
import { useTestServer } from "../support/server.js";
import { gpuClient, rest } from "./helpers.js";

// Offer search over REST and the generated client. Expected results are computed here, from the
// marketplace's own catalogue, with code independent of the service's.

const t = useTestServer();
let catalogue: MarketOffer[];

beforeAll(async () => {
  catalogue = await t.server.marketplace.listOffers();
});

interface OfferJson {
  id: string;
  gpu_name: string;
  num_gpus: number;
  gpu_ram: number;
  dph_total: number;
  rentable: boolean;
}
interface SearchJson {
  offers: OfferJson[];
  total: number;
  filtered_count: number;
  sort_info: { sort_by: string; order: string };
}

const search = (body: unknown) => rest<SearchJson>(t.server.url, "POST", "/api/gpu/search-offers", body);
const ids = (offers: Array<{ id: string }>) => offers.map((o) => o.id).sort();

describe("POST /api/gpu/search-offers filters", () => {
  it("matches gpu_name ignoring case, spaces, '_' and '-'", async () => {
    const expected = ids(catalogue.filter((o) => o.gpuName === "RTX 4090"));
    expect(expected.length).toBeGreaterThan(0);
    for (const name of ["4090", "rtx 4090", "RTX_4090", "rtx-4090"]) {
      const res = await search({ gpu_name: name, limit: 1000 });
      expect(res.status).toBe(200);
      expect(ids(res.body.offers)).toEqual(expected);
    }
  });

  it("applies max_price, min_gpu_ram, num_gpus and rentable", async () => {
    const cases: Array<[Record<string, unknown>, (o: MarketOffer) => boolean]> = [
      [{ max_price: 0.3 }, (o) => o.dphTotal <= 0.3],
      [{ min_gpu_ram: 48 }, (o) => o.gpuRam >= 48],
      [{ num_gpus: 4 }, (o) => o.numGpus === 4],
      [{ rentable: false }, (o) => !o.rentable],
      [{ rentable: true, min_gpu_ram: 24, max_price: 1 }, (o) => o.rentable && o.gpuRam >= 24 && o.dphTotal <= 1],
    ];
    for (const [body, keep] of cases) {
      const res = await search({ ...body, limit: 1000 });
      expect(res.status).toBe(200);
      expect(ids(res.body.offers)).toEqual(ids(catalogue.filter(keep)));
      expect(res.body.total).toBe(catalogue.length);
      expect(res.body.filtered_count).toBe(res.body.offers.length);
    }
  });
});

describe("the host facts of an offer", () => {
  it("shows each offer's direct ports, driver CUDA and reliability as the marketplace reports them", async () => {
    const res = await rest<{ offers: Array<OfferJson & { direct_port_count: number; cuda_max_good: number; reliability: number }> }>(
      t.server.url,
      "POST",
      "/api/gpu/search-offers",
      { limit: 1000 },
    );
    expect(res.status).toBe(200);
    const byId = new Map(catalogue.map((o) => [o.id, o]));
    for (const offer of res.body.offers) {
      const known = byId.get(offer.id)!;
      expect(offer).toMatchObject({ direct_port_count: known.directPortCount, cuda_max_good: known.cudaMaxGood, reliability: known.reliability });
    }
    // A market lists hosts that cannot serve a model: the caller sees which.
    expect(res.body.offers.some((o) => o.direct_port_count === 0)).toBe(true);
    expect(res.body.offers.some((o) => o.cuda_max_good < 12.8)).toBe(true);
  });
});

describe("POST /api/gpu/search-offers sorting and limit", () => {
  const sorts: Array<[string, string, (o: OfferJson) => number]> = [
    ["price", "ascending", (o) => o.dph_total],
    ["gpu_ram", "descending", (o) => -o.gpu_ram],
    ["num_gpus", "descending", (o) => -o.num_gpus],
    ["price_per_gpu", "ascending", (o) => o.dph_total / o.num_gpus],
  ];
  it.each(sorts)("sorts by %s, %s", async (sortBy, order, key) => {
    const res = await search({ sort_by: sortBy, limit: 1000 });
    expect(res.body.sort_info).toEqual({ sort_by: sortBy, order });
    const keys = res.body.offers.map(key);
    expect(keys).toEqual([...keys].sort((a, b) => a - b));
    expect(res.body.filtered_count).toBe(catalogue.length);
  });

  it("defaults to price ascending and 100 offers; total counts before filtering", async () => {
    const res = await search({});
    expect(res.body.sort_info).toEqual({ sort_by: "price", order: "ascending" });
    expect(res.body.offers).toHaveLength(100);
    expect(res.body).toMatchObject({ total: catalogue.length, filtered_count: 100 });
    const cheapest = [...catalogue].sort((a, b) => a.dphTotal - b.dphTotal)[0]!;
    expect(res.body.offers[0]!.dph_total).toBe(cheapest.dphTotal);
  });

  it("accepts limit 1 and 1000", async () => {
    expect((await search({ limit: 1 })).body.offers).toHaveLength(1);
    expect((await search({ limit: 1000 })).body.offers).toHaveLength(catalogue.length);
  });

  it.each([
    [{ limit: 0 }, "limit"],
    [{ limit: 1001 }, "limit"],
    [{ max_price: -1 }, "max_price"],
    [{ min_gpu_ram: -0.5 }, "min_gpu_ram"],
    [{ num_gpus: 0 }, "num_gpus"],
    [{ sort_by: "cheapest" }, "sort_by"],
  ])("refuses %j with a 400 naming the field", async (body, field) => {
    const res = await search(body);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ field });
    expect(String((res.body as unknown as { detail: string }).detail)).toContain(field);
  });

  it("names the allowed sort keys in the 400", async () => {
    const res = await search({ sort_by: "name" });
    expect((res.body as unknown as { detail: string }).detail).toBe("sort_by must be one of price, gpu_ram, num_gpus, price_per_gpu, got 'name'");
  });

  it.each([["{not json"], [JSON.stringify({ limit: "ten" })], [JSON.stringify({ max_price: "cheap" })], [JSON.stringify({ colour: "red" })]])(
    "refuses the malformed body %s with a 400",
    async (body) => {
      const res = await rest(t.server.url, "POST", "/api/gpu/search-offers", body);
      expect(res.status).toBe(400);
      expect(typeof res.body.detail).toBe("string");
    },
  );
});

describe("GET /api/gpu/offers", () => {
  it("filters by query parameters and reports total and filtered_count", async () => {
    const res = await rest<SearchJson>(t.server.url, "GET", "/api/gpu/offers?gpu_name=a100&max_price=1.5&rentable=true");
    expect(res.status).toBe(200);
    const expected = catalogue.filter((o) => o.gpuName.toLowerCase().includes("a100") && o.dphTotal <= 1.5 && o.rentable);
    expect(ids(res.body.offers)).toEqual(ids(expected));
    expect(res.body).toMatchObject({ total: catalogue.length, filtered_count: expected.length });
  });

  it("refuses a malformed number and a negative price", async () => {
    expect((await rest(t.server.url, "GET", "/api/gpu/offers?max_price=abc")).status).toBe(400);
    expect((await rest(t.server.url, "GET", "/api/gpu/offers?max_price=-2")).status).toBe(400);
    expect((await rest(t.server.url, "GET", "/api/gpu/offers?rentable=maybe")).status).toBe(400);
  });
});

describe("offer search over the generated Connect client", () => {
  it("searches with a filter and a sort key, and answers invalid_argument for a bad limit", async () => {
    const client = gpuClient(t.server.url);
    const res = await client.searchOffers({ minGpuRam: 80, sortBy: "price_per_gpu", limit: 5 });
    const expected = catalogue
      .filter((o) => o.gpuRam >= 80)
      .map((o) => o.dphTotal / o.numGpus)
      .sort((a, b) => a - b)
      .slice(0, 5);
    expect(res.offers.map((o) => o.dphTotal / o.numGpus)).toEqual(expected.map((v) => expect.closeTo(v, 9)));
    expect(res.sortInfo).toMatchObject({ sortBy: "price_per_gpu", order: "ascending" });
    const err = await client.searchOffers({ limit: 5000 }).catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
  });
});

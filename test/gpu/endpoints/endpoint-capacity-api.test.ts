import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EndpointStore } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import type { Marketplace } from "../../../src/gpu/marketplace/port.js";
import { InstanceStore } from "../../../src/gpu/store/instance-store.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { createFastSimulatedMarketplace, startTestServer, useTestServer, type TestServer } from "../../support/server.js";
import { gpuClient, rest } from "../helpers.js";

// `capacity` on an endpoint (SPEC.md section 2, "Interruptible replicas with on-demand
// fallback"): its defaults, validation naming `capacity.<field>`, the 400 of a marketplace
// without interruptible machines, PATCH on, change and reset (REST `"capacity": null`, Connect
// `update_mask`), and the answers' per-replica `interruptible` and kind counts. Endpoints here sit
// at 0 replicas, or hold replicas written by the test, so no machine is rented.

const ctx = useTestServer();

const DEFAULTS = { interruptible: false, on_demand_base: 0, fallback: true, bid_margin: 0.25, markets: [], spread_markets: false };

interface EndpointJson {
  detail?: string;
  field?: string;
  replicas?: number;
  capacity?: Record<string, number | boolean>;
  on_demand_replicas?: number;
  interruptible_replicas?: number;
  instances?: Array<{ instance_id: string; interruptible: boolean }>;
}

const post = (body: unknown, url = ctx.server.url) => rest<EndpointJson>(url, "POST", "/api/gpu/endpoints", body);
const patch = (name: string, body: unknown, url = ctx.server.url) => rest<EndpointJson>(url, "PATCH", `/api/gpu/endpoints/${name}`, body);

async function lastEvent(name: string): Promise<string> {
  const res = await rest<{ events: Array<{ detail: string; kind: string }> }>(ctx.server.url, "GET", `/api/gpu/endpoints/${name}/events?limit=1`);
  expect(res.body.events[0]!.kind).toBe("scaled");
  return res.body.events[0]!.detail;
}

const base = { template_name: "budget", max_cost_per_hour: 1, replicas: 0 };
const withCapacity = (capacity: unknown) => ({ ...base, name: "cap-bad", capacity });

describe("endpoint capacity over REST", () => {
  it("shows the defaults (every replica on-demand) when never set, and fills in omitted settings", async () => {
    const plain = await post({ ...base, name: "cap-plain" });
    expect(plain.status).toBe(200);
    expect(plain.body).toMatchObject({ capacity: DEFAULTS, on_demand_replicas: 0, interruptible_replicas: 0, instances: [] });
    expect(await lastEvent("cap-plain")).toBe("created with 0 replica(s) of 'budget' within $1/h");

    const spot = await post({ ...base, name: "cap-spot", capacity: { interruptible: true, on_demand_base: 1 } });
    expect(spot.status).toBe(200);
    expect(spot.body.capacity).toEqual({ interruptible: true, on_demand_base: 1, fallback: true, bid_margin: 0.25, markets: [], spread_markets: false });
    expect(await lastEvent("cap-spot")).toBe(
      "created with 0 replica(s) of 'budget' within $1/h, capacity interruptible, 1 on-demand base, fallback, bid margin 0.25",
    );
    const read = await rest<EndpointJson>(ctx.server.url, "GET", "/api/gpu/endpoints/cap-spot");
    expect(read.body.capacity).toEqual({ interruptible: true, on_demand_base: 1, fallback: true, bid_margin: 0.25, markets: [], spread_markets: false });
  });

  it.each([
    ["capacity.on_demand_base", withCapacity({ on_demand_base: -1 })],
    ["capacity.on_demand_base", withCapacity({ on_demand_base: 17 })],
    ["capacity.bid_margin", withCapacity({ bid_margin: -0.01 })],
    ["capacity.bid_margin", withCapacity({ bid_margin: 1.01 })],
    ["capacity.bogus", withCapacity({ bogus: 1 })],
  ])("answers 400 naming %s and writes nothing", async (field, body) => {
    const res = await post(body);
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
    expect(res.body.detail).toContain(field.replace("capacity.", ""));
    expect(await ctx.db.knex("gpu_endpoints").where({ name: "cap-bad" }).count({ n: "*" }).first()).toEqual({ n: "0" });
  });

  it("refuses a value of the wrong JSON type before validation, naming the setting in its detail", async () => {
    // Protobuf's JSON reader refuses these for the REST layer (a 400 without `field`, as for every message).
    for (const capacity of [{ on_demand_base: 1.5 }, { interruptible: "yes" }, { bid_margin: "high" }]) {
      const res = await post(withCapacity(capacity));
      expect(res.status).toBe(400);
      expect(res.body.detail).toContain(`gpu.v1.EndpointCapacity.${Object.keys(capacity)[0]}`);
    }
  });

  it("names the rule in its messages, and accepts the bounds themselves", async () => {
    expect((await post(withCapacity({ on_demand_base: 17 }))).body.detail).toBe("capacity.on_demand_base must be an integer from 0 to 16, got 17");
    expect((await post(withCapacity({ bid_margin: 1.5 }))).body.detail).toBe("capacity.bid_margin must be a number from 0 to 1, got 1.5");
    const edges = await post({ ...base, name: "cap-edges", capacity: { interruptible: true, on_demand_base: 16, fallback: false, bid_margin: 1 } });
    expect(edges.body.capacity).toEqual({ interruptible: true, on_demand_base: 16, fallback: false, bid_margin: 1, markets: [], spread_markets: false });
    const zero = await post({ ...base, name: "cap-zero", capacity: { bid_margin: 0 } });
    expect(zero.body.capacity).toEqual({ ...DEFAULTS, bid_margin: 0 });
  });

  it("turns interruptible on, changes it, and resets it with null; each change a scaled event", async () => {
    await post({ ...base, name: "cap-patch" });

    const on = await patch("cap-patch", { capacity: { interruptible: true, on_demand_base: 1 } });
    expect(on.status).toBe(200);
    expect(on.body.capacity).toEqual({ interruptible: true, on_demand_base: 1, fallback: true, bid_margin: 0.25, markets: [], spread_markets: false });
    expect(await lastEvent("cap-patch")).toBe("capacity: interruptible, 1 on-demand base, fallback, bid margin 0.25");

    // A whole replacement: what is left out takes its default, not the previous value.
    const changed = await patch("cap-patch", { capacity: { interruptible: true, fallback: false, bid_margin: 0.5 } });
    expect(changed.body.capacity).toEqual({ interruptible: true, on_demand_base: 0, fallback: false, bid_margin: 0.5, markets: [], spread_markets: false });
    expect(await lastEvent("cap-patch")).toBe("capacity: interruptible, 0 on-demand base, no fallback, bid margin 0.5");

    const bad = await patch("cap-patch", { capacity: { bid_margin: 2 } });
    expect(bad.body).toMatchObject({ field: "capacity.bid_margin" });
    expect((await rest<EndpointJson>(ctx.server.url, "GET", "/api/gpu/endpoints/cap-patch")).body.capacity).toMatchObject({ bid_margin: 0.5 });

    const reset = await patch("cap-patch", { capacity: null });
    expect(reset.status).toBe(200);
    expect(reset.body.capacity).toEqual(DEFAULTS);
    expect(await lastEvent("cap-patch")).toBe("capacity: on-demand, 0 on-demand base, fallback, bid margin 0.25");

    // Nothing changed: no event.
    const events = async () => (await rest<{ events: unknown[] }>(ctx.server.url, "GET", "/api/gpu/endpoints/cap-patch/events")).body.events.length;
    const before = await events();
    expect((await patch("cap-patch", { capacity: null })).status).toBe(200);
    expect(await events()).toBe(before);
  });

  it("changes capacity beside the other fields, and an explicit mask must name it", async () => {
    await post({ ...base, name: "cap-mixed" });
    const both = await patch("cap-mixed", { capacity: { interruptible: true }, max_cost_per_hour: 2 });
    expect(both.body).toMatchObject({ capacity: { interruptible: true }, max_cost_per_hour: 2 });
    expect(await lastEvent("cap-mixed")).toBe("capacity: interruptible, 0 on-demand base, fallback, bid margin 0.25, max_cost_per_hour $1/h -> $2/h");
    expect((await patch("cap-mixed", { update_mask: "replicas", replicas: 0, capacity: { interruptible: false } })).body.field).toBe("capacity");
  });

  it("shows each replica's kind and the counts of each over the replicas listed", async () => {
    const store = EndpointStore.create({ knex: ctx.db.knex });
    const instances = InstanceStore.create({ knex: ctx.db.knex });
    // Written in one transaction, as the controller's launches would have left them: 4 replicas
    // for a target of 4, so the controller (running in this server) has nothing to launch.
    await ctx.db.knex.transaction(async (trx) => {
      const endpoint = await store.insert(
        { name: "cap-mix", templateName: "budget", replicas: 4, maxCostPerHour: 10, customConfig: {}, autoscale: null, capacity: { interruptible: true, onDemandBase: 1, fallback: true, bidMargin: 0.25, markets: [], spreadMarkets: false } },
        trx,
      );
      await store.setControl(endpoint.id, { nextLaunchAt: new Date(Date.now() + 3_600_000) }, trx);
      const kinds = [
        ["gpu-cap-base", undefined],
        ["gpu-cap-bid", { interruptible: true, fallback: false }],
        ["gpu-cap-fallback", { interruptible: false, fallback: true }],
      ] as const;
      for (const [instanceId, kind] of kinds) {
        await store.replicas.insert(endpoint.id, instanceId, trx, kind);
        await instances.insertCreating(
          {
            instanceId,
            marketLabel: `test/${instanceId}`,
            offerId: "1",
            imageName: "vllm",
            gpuInfo: { gpuName: "RTX 3060", numGpus: 1, gpuRam: 12 },
            costPerHour: 0.1,
            templateName: "budget",
            startCommand: "",
            autoDestroy: false,
            maxHours: null,
            maxCost: null,
            modelApiKey: null,
            endpoint: "cap-mix",
            // What was rented is the record's: a bid for the bid, on-demand for the others.
            bidPerHour: kind?.interruptible ? 0.05 : null,
          },
          trx,
        );
      }
      // A launch whose record is not written yet: not listed, so not counted either.
      await store.replicas.insert(endpoint.id, "gpu-cap-unwritten", trx, { interruptible: true, fallback: false });
    });

    const rows = await store.replicas.listOf((await store.getByName("cap-mix"))!.id);
    expect(rows.map((r) => [r.instanceId, r.interruptible, r.fallback])).toEqual([
      ["gpu-cap-base", false, false],
      ["gpu-cap-bid", true, false],
      ["gpu-cap-fallback", false, true],
      ["gpu-cap-unwritten", true, false],
    ]);

    const read = await rest<EndpointJson>(ctx.server.url, "GET", "/api/gpu/endpoints/cap-mix");
    expect(read.body).toMatchObject({ on_demand_replicas: 2, interruptible_replicas: 1 });
    expect(read.body.instances!.map((i) => [i.instance_id, i.interruptible])).toEqual([
      ["gpu-cap-base", false],
      ["gpu-cap-bid", true],
      ["gpu-cap-fallback", false],
    ]);
    await expect(ctx.db.knex("gpu_endpoint_replicas").insert({ endpoint_id: rows[0]!.endpointId, instance_id: "gpu-cap-both", interruptible: true, fallback: true })).rejects.toThrow(
      /gpu_endpoint_replicas_kind_check/,
    );
  });
});

describe("endpoint capacity over Connect", () => {
  it("creates with capacity and resets it with update_mask", async () => {
    const client = gpuClient(ctx.server.url);
    const created = await client.createEndpoint({ name: "cap-typed", templateName: "budget", replicas: 0, maxCostPerHour: 1, capacity: { interruptible: true, bidMargin: 0.1 } });
    expect(created).toMatchObject({ capacity: { interruptible: true, onDemandBase: 0, fallback: true, bidMargin: 0.1 }, onDemandReplicas: 0, interruptibleReplicas: 0 });

    const refused = await client.updateEndpoint({ name: "cap-typed", capacity: { onDemandBase: 20 } }).catch((e: unknown) => ConnectError.from(e));
    expect(refused).toMatchObject({ code: Code.InvalidArgument });

    const reset = await client.updateEndpoint({ name: "cap-typed", updateMask: { paths: ["capacity"] } });
    expect(reset.capacity).toEqual(expect.objectContaining({ interruptible: false, onDemandBase: 0, fallback: true, bidMargin: 0.25 }));
  });
});

describe("endpoint capacity on a marketplace without interruptible machines", () => {
  let db: TestDatabase | undefined;
  let server: TestServer | undefined;
  const simulated = createFastSimulatedMarketplace();

  beforeAll(async () => {
    db = await createTestDatabase();
    // The simulated marketplace without its flag: as a marketplace that rents no bids (remote).
    const { interruptible: _, ...onDemandOnly } = simulated;
    server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace: onDemandOnly as Marketplace });
  });
  afterAll(async () => {
    await server?.close();
    await simulated.close();
    await db?.drop();
  });

  it("answers 400 naming capacity.interruptible on POST and PATCH, and takes on-demand capacity", async () => {
    const url = server!.url;
    const refused = await post({ ...base, name: "cap-nobids", capacity: { interruptible: true } }, url);
    expect(refused).toMatchObject({ status: 400, body: { field: "capacity.interruptible" } });
    expect(refused.body.detail).toContain("rents no interruptible machines");

    const onDemand = await post({ ...base, name: "cap-nobids", capacity: { interruptible: false, on_demand_base: 2 } }, url);
    expect(onDemand.status).toBe(200);
    expect((await patch("cap-nobids", { capacity: { interruptible: true } }, url)).body.field).toBe("capacity.interruptible");
    expect((await patch("cap-nobids", { capacity: null }, url)).body.capacity).toEqual(DEFAULTS);
  });
});

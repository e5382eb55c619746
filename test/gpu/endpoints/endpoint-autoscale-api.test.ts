import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { EndpointStore } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { useTestServer } from "../../support/server.js";
import { gpuClient, rest } from "../helpers.js";

// `autoscale` on an endpoint (SPEC.md section 2, "autoscaling and scale to zero"): its settings
// and defaults, validation naming `autoscale.<field>`, the target shown as `replicas`, PATCH on,
// change and off (REST `"autoscale": null`, Connect `update_mask`). Endpoints here sit at 0
// replicas or within a budget no offer fits, so no machine is rented.

const ctx = useTestServer();

/** Below any offer's price: a target above 0 is held by the budget, nothing is rented. */
const TINY_BUDGET = 0.0001;
const DEFAULTS = { target_in_flight: 4, scale_up_after_s: 30, scale_down_after_s: 600 };

interface EndpointJson {
  detail?: string;
  field?: string;
  replicas?: number;
  state?: string;
  autoscale?: Record<string, number> | null;
}

const post = (body: unknown) => rest<EndpointJson>(ctx.server.url, "POST", "/api/gpu/endpoints", body);
const patch = (name: string, body: unknown) => rest<EndpointJson>(ctx.server.url, "PATCH", `/api/gpu/endpoints/${name}`, body);

async function lastEvent(name: string): Promise<string> {
  const res = await rest<{ events: Array<{ detail: string; kind: string }> }>(ctx.server.url, "GET", `/api/gpu/endpoints/${name}/events?limit=1`);
  expect(res.body.events[0]!.kind).toBe("scaled");
  return res.body.events[0]!.detail;
}

const base = { template_name: "budget", max_cost_per_hour: 1 };
const scaled = (autoscale: unknown) => ({ ...base, name: "as-bad", autoscale });

describe("endpoint autoscale over REST", () => {
  it("creates an autoscaled endpoint at min_replicas, idle at 0, with the defaults filled in", async () => {
    const created = await post({ ...base, name: "as-idle", autoscale: { min_replicas: 0, max_replicas: 3 } });
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({ replicas: 0, state: "idle", autoscale: { min_replicas: 0, max_replicas: 3, ...DEFAULTS } });
    expect(await lastEvent("as-idle")).toBe("created with 0 replica(s) of 'budget' within $1/h, autoscale 0..3, target 4 in flight, up after 30 s, down after 600 s");

    const fixed = await post({ ...base, name: "as-parked", replicas: 0 });
    expect(fixed.body.state).toBe("parked");
    expect("autoscale" in fixed.body).toBe(false);

    const atMin = await post({ ...base, name: "as-min", max_cost_per_hour: TINY_BUDGET, autoscale: { min_replicas: 2, max_replicas: 5, target_in_flight: 10 } });
    expect(atMin.body).toMatchObject({ replicas: 2, autoscale: { min_replicas: 2, max_replicas: 5, target_in_flight: 10, scale_up_after_s: 30 } });
    const read = await rest<EndpointJson>(ctx.server.url, "GET", "/api/gpu/endpoints/as-min");
    expect(read.body.autoscale).toEqual({ min_replicas: 2, max_replicas: 5, target_in_flight: 10, scale_up_after_s: 30, scale_down_after_s: 600 });
  });

  it.each([
    ["replicas", { ...base, name: "as-bad", replicas: 1, autoscale: { min_replicas: 0, max_replicas: 1 } }],
    ["autoscale.min_replicas", scaled({ max_replicas: 2 })],
    ["autoscale.min_replicas", scaled({ min_replicas: -1, max_replicas: 2 })],
    ["autoscale.min_replicas", scaled({ min_replicas: 17, max_replicas: 16 })],
    ["autoscale.max_replicas", scaled({ min_replicas: 0 })],
    ["autoscale.max_replicas", scaled({ min_replicas: 0, max_replicas: 0 })],
    ["autoscale.max_replicas", scaled({ min_replicas: 0, max_replicas: 17 })],
    ["autoscale.max_replicas", scaled({ min_replicas: 3, max_replicas: 2 })],
    ["autoscale.target_in_flight", scaled({ min_replicas: 0, max_replicas: 2, target_in_flight: 0 })],
    ["autoscale.target_in_flight", scaled({ min_replicas: 0, max_replicas: 2, target_in_flight: 1001 })],
    ["autoscale.scale_up_after_s", scaled({ min_replicas: 0, max_replicas: 2, scale_up_after_s: -1 })],
    ["autoscale.scale_up_after_s", scaled({ min_replicas: 0, max_replicas: 2, scale_up_after_s: 3601 })],
    ["autoscale.scale_down_after_s", scaled({ min_replicas: 0, max_replicas: 2, scale_down_after_s: 29 })],
    ["autoscale.scale_down_after_s", scaled({ min_replicas: 0, max_replicas: 2, scale_down_after_s: 86_401 })],
    ["autoscale.bogus", scaled({ min_replicas: 0, max_replicas: 2, bogus: 1 })],
  ])("answers 400 naming %s and writes nothing", async (field, body) => {
    const res = await post(body);
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
    expect(res.body.detail).toContain(field.replace("autoscale.", ""));
    expect(await ctx.db.knex("gpu_endpoints").where({ name: "as-bad" }).count({ n: "*" }).first()).toEqual({ n: "0" });
  });

  it("names the rule in its messages", async () => {
    expect((await post(scaled({ min_replicas: 3, max_replicas: 2 }))).body.detail).toBe("autoscale.max_replicas must be >= autoscale.min_replicas (3), got 2");
    expect((await post(scaled({ min_replicas: 0, max_replicas: 2, scale_down_after_s: 29 }))).body.detail).toBe(
      "autoscale.scale_down_after_s must be an integer from 30 to 86400, got 29",
    );
    expect((await post(scaled({ max_replicas: 2 }))).body.detail).toBe("autoscale.min_replicas is required (0..16)");
  });

  it("turns autoscale on (target clamped), changes it, refuses replicas meanwhile, and turns it off keeping the count", async () => {
    await post({ ...base, name: "as-patch", replicas: 3, max_cost_per_hour: TINY_BUDGET });

    const on = await patch("as-patch", { autoscale: { min_replicas: 0, max_replicas: 2 } });
    expect(on.body).toMatchObject({ replicas: 2, autoscale: { min_replicas: 0, max_replicas: 2, ...DEFAULTS } });
    expect(await lastEvent("as-patch")).toBe("autoscale on: 0..2, target 4 in flight, up after 30 s, down after 600 s, replicas 3 -> 2");

    const refused = await patch("as-patch", { replicas: 1 });
    expect(refused).toMatchObject({ status: 400, body: { field: "replicas" } });
    expect(refused.body.detail).toContain('"autoscale": null');
    expect((await patch("as-patch", { replicas: 1, autoscale: { min_replicas: 0, max_replicas: 2 } })).body.field).toBe("replicas");
    expect((await patch("as-patch", { autoscale: { min_replicas: 5, max_replicas: 4 } })).body.field).toBe("autoscale.max_replicas");

    const changed = await patch("as-patch", { autoscale: { min_replicas: 4, max_replicas: 6, scale_up_after_s: 0 } });
    expect(changed.body).toMatchObject({ replicas: 4, autoscale: { min_replicas: 4, max_replicas: 6, scale_up_after_s: 0, target_in_flight: 4 } });
    expect(await lastEvent("as-patch")).toBe("autoscale changed: 4..6, target 4 in flight, up after 0 s, down after 600 s, replicas 2 -> 4");

    const budgetOnly = await patch("as-patch", { max_cost_per_hour: 0.0002 });
    expect(budgetOnly.body).toMatchObject({ replicas: 4, autoscale: { min_replicas: 4 } });

    const off = await patch("as-patch", { autoscale: null });
    expect(off.status).toBe(200);
    expect(off.body.replicas).toBe(4);
    expect(off.body.autoscale ?? null).toBeNull();
    expect(await lastEvent("as-patch")).toBe("autoscale off: fixed at 4 replica(s)");
    expect((await patch("as-patch", { replicas: 1 })).body.replicas).toBe(1);
    expect((await patch("as-patch", { autoscale: null })).status).toBe(200);
  });

  it("turns it off at a count given with it, and goes idle or parked at 0 by its mode", async () => {
    await post({ ...base, name: "as-zero", autoscale: { min_replicas: 0, max_replicas: 2 } });
    const off = await patch("as-zero", { autoscale: null, replicas: 0 });
    expect(off.body).toMatchObject({ replicas: 0, state: "parked" });
    expect(await lastEvent("as-zero")).toBe("autoscale off: fixed at 0 replica(s), replicas 0 -> 0");
    expect((await patch("as-zero", { autoscale: { min_replicas: 0, max_replicas: 1 } })).body).toMatchObject({ replicas: 0, state: "idle" });
  });

  it("refuses a field named but not cleared, an unknown mask path, and a field set outside the mask", async () => {
    await post({ ...base, name: "as-mask", replicas: 0 });
    expect((await patch("as-mask", { replicas: null })).body).toMatchObject({ field: "replicas", detail: "replicas cannot be cleared: give a count (0..16)" });
    expect((await patch("as-mask", { max_cost_per_hour: null })).body.field).toBe("max_cost_per_hour");
    expect((await patch("as-mask", { update_mask: "name" })).body.field).toBe("update_mask");
    expect((await patch("as-mask", { update_mask: "autoscale", replicas: 1 })).body.field).toBe("replicas");
    expect((await patch("as-mask", {})).status).toBe(400);
    // An explicit mask is honoured as given: here it clears autoscale (already off) and sets the budget.
    expect((await patch("as-mask", { update_mask: "autoscale,maxCostPerHour", max_cost_per_hour: 2 })).body).toMatchObject({ max_cost_per_hour: 2, replicas: 0 });
  });
});

describe("endpoint autoscale over Connect", () => {
  it("creates with autoscale and turns it off with update_mask", async () => {
    const client = gpuClient(ctx.server.url);
    const created = await client.createEndpoint({ name: "as-typed", templateName: "budget", maxCostPerHour: 1, autoscale: { minReplicas: 0, maxReplicas: 2 } });
    expect(created).toMatchObject({ state: "idle", replicas: 0, autoscale: { minReplicas: 0, maxReplicas: 2, targetInFlight: 4, scaleUpAfterS: 30, scaleDownAfterS: 600 } });

    const replicasRefused = await client.updateEndpoint({ name: "as-typed", replicas: 1 }).catch((e: unknown) => ConnectError.from(e));
    expect(replicasRefused).toMatchObject({ code: Code.InvalidArgument });

    // Without a mask, an unset autoscale is no change at all: there is nothing to do.
    const nothing = await client.updateEndpoint({ name: "as-typed" }).catch((e: unknown) => ConnectError.from(e));
    expect(nothing).toMatchObject({ code: Code.InvalidArgument });

    const off = await client.updateEndpoint({ name: "as-typed", updateMask: { paths: ["autoscale"] } });
    expect(off.autoscale).toBeUndefined();
    expect(off).toMatchObject({ replicas: 0, state: "parked" });
  });
});

describe("the store's target for the autoscaler", () => {
  it("moves the target of an active endpoint; a rise opens the launch gate, a fall keeps the backoff", async () => {
    const store = EndpointStore.create({ knex: ctx.db.knex });
    const created = await post({ ...base, name: "as-target", max_cost_per_hour: TINY_BUDGET, autoscale: { min_replicas: 0, max_replicas: 4 } });
    expect(created.status).toBe(200);
    const { id, autoscale } = (await store.getByName("as-target"))!;
    const settings = autoscale!;
    const later = new Date(Date.now() + 3_600_000);

    // In one transaction: the server's controller keeps this endpoint too, and must not write between.
    await ctx.db.knex.transaction(async (trx) => {
      await store.setControl(id, { nextLaunchAt: later }, trx);
      expect(await store.setTarget(id, 0, settings, 0, trx)).toMatchObject({ replicas: 0, nextLaunchAt: later });
      expect(await store.setTarget(id, 0, settings, 3, trx)).toMatchObject({ replicas: 3, nextLaunchAt: null });
      await store.setControl(id, { nextLaunchAt: later }, trx);
      expect(await store.setTarget(id, 3, settings, 1, trx)).toMatchObject({ replicas: 1, nextLaunchAt: later, autoscale: { maxReplicas: 4 } });
      // A round that read another target, or other settings, than the endpoint has now (a PATCH meanwhile) writes nothing.
      expect(await store.setTarget(id, 3, settings, 2, trx)).toBeNull();
      const patched = { ...settings, maxReplicas: 2 };
      expect(await store.update(id, { autoscale: patched }, trx)).toMatchObject({ replicas: 1, autoscale: { maxReplicas: 2 } });
      expect(await store.setTarget(id, 1, settings, 4, trx)).toBeNull();
      expect(await store.setTarget(id, 1, patched, 2, trx)).toMatchObject({ replicas: 2 });
      await store.markDeleting(id, trx);
      expect(await store.setTarget(id, 2, patched, 1, trx)).toBeNull();
    });
  });
});

import { describe, expect, it } from "vitest";
import { useTestServer } from "../../support/server.js";
import { gpuClient, rest } from "../helpers.js";

// `routing` on an endpoint (SPEC.md section 2, "Requests that share a prompt go where it is
// cached"): prefix by default, least_outstanding on request, on create and PATCH; anything else a
// 400 naming routing that changes nothing. Parked endpoints: no machine is rented.

const ctx = useTestServer();

const parked = { template_name: "budget", replicas: 0, max_cost_per_hour: 1 };

type Answer = { routing?: string; field?: string; detail?: string };
const post = (body: unknown) => rest<Answer>(ctx.server.url, "POST", "/api/gpu/endpoints", body);
const patch = (name: string, body: unknown) => rest<Answer>(ctx.server.url, "PATCH", `/api/gpu/endpoints/${name}`, body);
const routingOf = async (name: string) => (await rest<Answer>(ctx.server.url, "GET", `/api/gpu/endpoints/${name}`)).body.routing;

describe("an endpoint's routing", () => {
  it("is prefix unless the request says least_outstanding, and is stored", async () => {
    expect((await post({ ...parked, name: "rt-default" })).body.routing).toBe("prefix");
    expect((await post({ ...parked, name: "rt-least", routing: "least_outstanding" })).body.routing).toBe("least_outstanding");
    expect(await routingOf("rt-least")).toBe("least_outstanding");
    const rows = await ctx.db.knex("gpu_endpoints").select("name", "routing").orderBy("name");
    expect(rows).toEqual([
      { name: "rt-default", routing: "prefix" },
      { name: "rt-least", routing: "least_outstanding" },
    ]);
  });

  it.each(["", "round_robin", "PREFIX"])("answers 400 naming routing for %j and creates nothing", async (routing) => {
    const res = await post({ ...parked, name: "rt-bad", routing });
    expect(res.status).toBe(400);
    expect(res.body.field).toBe("routing");
    expect(res.body.detail).toContain("prefix, least_outstanding");
    expect(await ctx.db.knex("gpu_endpoints").where({ name: "rt-bad" }).count({ n: "*" }).first()).toEqual({ n: "0" });
  });

  it("changes by PATCH, said in a scaled event; a bad value or a clearing changes nothing", async () => {
    await post({ ...parked, name: "rt-patch" });
    expect(await patch("rt-patch", { routing: "least_outstanding" })).toMatchObject({ status: 200, body: { routing: "least_outstanding" } });
    expect(await routingOf("rt-patch")).toBe("least_outstanding");
    for (const body of [{ routing: "fastest" }, { routing: null }]) {
      const bad = await patch("rt-patch", body);
      expect(bad.status).toBe(400);
      expect(bad.body.field).toBe("routing");
    }
    expect(await routingOf("rt-patch")).toBe("least_outstanding");
    const events = await rest<{ events: Array<{ kind: string; detail: string }> }>(ctx.server.url, "GET", "/api/gpu/endpoints/rt-patch/events?limit=1");
    expect(events.body.events[0]).toMatchObject({ kind: "scaled", detail: "routing prefix -> least_outstanding" });
  });

  it("is in the typed client, update_mask naming routing", async () => {
    const client = gpuClient(ctx.server.url);
    expect(await client.createEndpoint({ name: "rt-typed", templateName: "budget", replicas: 0, maxCostPerHour: 1 })).toMatchObject({ routing: "prefix" });
    const changed = await client.updateEndpoint({ name: "rt-typed", routing: "least_outstanding", updateMask: { paths: ["routing"] } });
    expect(changed.routing).toBe("least_outstanding");
  });

  it("of an endpoint written before it existed is prefix", async () => {
    await ctx.db.knex("gpu_endpoints").insert({ name: "rt-old", template_name: "budget", replicas: 0, max_cost_per_hour: 1, custom_config: "{}" });
    expect(await routingOf("rt-old")).toBe("prefix");
  });
});

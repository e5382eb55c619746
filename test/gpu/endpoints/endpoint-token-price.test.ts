import { describe, expect, it } from "vitest";
import { useTestServer } from "../../support/server.js";
import { gpuClient, rest } from "../helpers.js";

// An endpoint's token_price (SPEC.md section 2, "Keys for callers"): optional on create and
// PATCH, dollars per million tokens >= 0, stored on the endpoint row, cleared by a PATCH naming
// it null; bad input a 400 naming the field. The endpoints are parked: nothing is rented.

const ctx = useTestServer();

const base = { template_name: "budget", replicas: 0, max_cost_per_hour: 1 };
type EndpointJson = { token_price?: { input_per_mtok?: number; output_per_mtok?: number }; field?: string; detail?: string };

describe("an endpoint's token price", () => {
  it("is set on create, shown, changed and cleared by PATCH, and stored on the row", async () => {
    const created = await rest<EndpointJson>(ctx.server.url, "POST", "/api/gpu/endpoints", { ...base, name: "priced", token_price: { input_per_mtok: 0.2, output_per_mtok: 0.6 } });
    expect(created).toMatchObject({ status: 200, body: { token_price: { input_per_mtok: 0.2, output_per_mtok: 0.6 } } });
    expect(await ctx.db.knex("gpu_endpoints").where({ name: "priced" }).first()).toMatchObject({ token_input_per_mtok: 0.2, token_output_per_mtok: 0.6 });

    const patch = (body: unknown) => rest<EndpointJson>(ctx.server.url, "PATCH", "/api/gpu/endpoints/priced", body);
    expect((await patch({ token_price: { input_per_mtok: 1, output_per_mtok: 3 } })).body.token_price).toEqual({ input_per_mtok: 1, output_per_mtok: 3 });
    // Another field's PATCH leaves the price as it is.
    expect((await patch({ max_cost_per_hour: 2 })).body.token_price).toEqual({ input_per_mtok: 1, output_per_mtok: 3 });
    const cleared = await patch({ token_price: null });
    expect(cleared.status).toBe(200);
    expect(cleared.body.token_price).toBeUndefined();
    expect(await ctx.db.knex("gpu_endpoints").where({ name: "priced" }).first()).toMatchObject({ token_input_per_mtok: null, token_output_per_mtok: null });
    const events = await rest<{ events: Array<{ detail: string }> }>(ctx.server.url, "GET", "/api/gpu/endpoints/priced/events");
    expect(events.body.events.map((e) => e.detail)).toContain("token_price $1/$3 per million input/output tokens -> none");
  });

  it("is optional: an endpoint without one is unpriced", async () => {
    const created = await rest<EndpointJson>(ctx.server.url, "POST", "/api/gpu/endpoints", { ...base, name: "unpriced" });
    expect(created.status).toBe(200);
    expect(created.body.token_price).toBeUndefined();
  });

  it.each([
    ["token_price.input_per_mtok", { input_per_mtok: -0.1, output_per_mtok: 1 }],
    ["token_price.output_per_mtok", { input_per_mtok: 1, output_per_mtok: -2 }],
  ])("answers 400 naming %s on create and PATCH, and changes nothing", async (field, token_price) => {
    const create = await rest<EndpointJson>(ctx.server.url, "POST", "/api/gpu/endpoints", { ...base, name: "bad-price", token_price });
    expect(create).toMatchObject({ status: 400, body: { field } });
    expect(await ctx.db.knex("gpu_endpoints").where({ name: "bad-price" }).first()).toBeUndefined();
    await rest(ctx.server.url, "POST", "/api/gpu/endpoints", { ...base, name: "kept-price", token_price: { input_per_mtok: 1, output_per_mtok: 1 } });
    const patch = await rest<EndpointJson>(ctx.server.url, "PATCH", "/api/gpu/endpoints/kept-price", { token_price });
    expect(patch).toMatchObject({ status: 400, body: { field } });
    expect(await ctx.db.knex("gpu_endpoints").where({ name: "kept-price" }).first()).toMatchObject({ token_input_per_mtok: 1, token_output_per_mtok: 1 });
    await rest(ctx.server.url, "DELETE", "/api/gpu/endpoints/kept-price");
    await ctx.db.knex("gpu_endpoints").where({ name: "kept-price" }).update({ phase: "deleted" });
  });

  it("is served by the typed client", async () => {
    const client = gpuClient(ctx.server.url);
    const created = await client.createEndpoint({ name: "typed-price", templateName: "budget", replicas: 0, maxCostPerHour: 1, tokenPrice: { inputPerMtok: 0.1, outputPerMtok: 0.3 } });
    expect(created.tokenPrice).toMatchObject({ inputPerMtok: 0.1, outputPerMtok: 0.3 });
    const cleared = await client.updateEndpoint({ name: "typed-price", updateMask: { paths: ["token_price"] } });
    expect(cleared.tokenPrice).toBeUndefined();
  });
});

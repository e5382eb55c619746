import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { useTestServer } from "../../support/server.js";
import { gpuClient, rest } from "../helpers.js";

// The endpoint resource's contract: validation (400 naming the field, nothing written), 409 on
// a name in use, 404 on an unknown name, the typed client. The server's controller runs, but
// these endpoints are parked (replicas 0) or refused, so no machine is rented.

const ctx = useTestServer();

const valid = { name: "api-one", template_name: "budget", replicas: 0, max_cost_per_hour: 1 };

async function post(body: unknown) {
  return rest<{ detail?: string; field?: string; state?: string }>(ctx.server.url, "POST", "/api/gpu/endpoints", body);
}

describe("endpoint resource", () => {
  it.each([
    ["name", { ...valid, name: "Upper" }],
    ["name", { ...valid, name: "9starts-with-digit" }],
    ["name", { ...valid, name: `a${"b".repeat(40)}` }],
    ["name", { ...valid, name: "" }],
    ["template_name", { ...valid, template_name: "no-such-template" }],
    ["template_name", { ...valid, template_name: "" }],
    ["replicas", { ...valid, replicas: 17 }],
    ["replicas", { ...valid, replicas: -1 }],
    ["replicas", { name: "x", template_name: "budget", max_cost_per_hour: 1 }],
    ["max_cost_per_hour", { ...valid, max_cost_per_hour: 0 }],
    ["max_cost_per_hour", { ...valid, max_cost_per_hour: -2 }],
    ["max_cost_per_hour", { name: "x", template_name: "budget", replicas: 1 }],
    ["custom_config.bogus", { ...valid, custom_config: { bogus: 1 } }],
  ])("answers 400 naming %s and writes nothing", async (field, body) => {
    const res = await post(body);
    expect(res.status).toBe(400);
    expect(res.body.field).toBe(field);
    expect(res.body.detail).toBeTruthy();
    expect(await ctx.db.knex("gpu_endpoints").count({ n: "*" }).first()).toEqual({ n: "0" });
  });

  it("answers 400 for a body of the wrong type", async () => {
    expect((await post({ ...valid, replicas: "two" })).status).toBe(400);
    expect((await post("not json")).status).toBe(400);
  });

  it("creates, reads, lists and refuses a second endpoint of the same name with 409", async () => {
    const created = await post(valid);
    expect(created.status).toBe(200);
    expect(created.body).toMatchObject({
      name: "api-one",
      template_name: "budget",
      replicas: 0,
      max_cost_per_hour: 1,
      state: "parked",
      ready_replicas: 0,
      url: "/endpoints/api-one/v1",
    });
    const again = await post({ ...valid, template_name: "research" });
    expect(again.status).toBe(409);
    expect(again.body.detail).toContain("api-one");
    const list = await rest<{ endpoints: Array<{ name: string }> }>(ctx.server.url, "GET", "/api/gpu/endpoints");
    expect(list.body.endpoints.map((e) => e.name)).toEqual(["api-one"]);
    expect((await rest(ctx.server.url, "GET", "/api/gpu/endpoints/api-one")).status).toBe(200);
  });

  it("answers 404 for an unknown endpoint on every route", async () => {
    for (const [method, path] of [
      ["GET", "/api/gpu/endpoints/nope"],
      ["PATCH", "/api/gpu/endpoints/nope"],
      ["DELETE", "/api/gpu/endpoints/nope"],
      ["GET", "/api/gpu/endpoints/nope/events"],
    ] as const) {
      const res = await rest(ctx.server.url, method, path, method === "PATCH" ? { replicas: 1 } : undefined);
      expect(res.status, `${method} ${path}`).toBe(404);
    }
  });

  it("validates a patch and the events limit", async () => {
    await post({ ...valid, name: "api-patch" });
    const patch = (body: unknown) => rest<{ field?: string }>(ctx.server.url, "PATCH", "/api/gpu/endpoints/api-patch", body);
    expect((await patch({})).status).toBe(400);
    expect((await patch({ replicas: 99 })).body.field).toBe("replicas");
    expect((await patch({ max_cost_per_hour: 0 })).body.field).toBe("max_cost_per_hour");
    const ok = await patch({ max_cost_per_hour: 2.5 });
    expect(ok).toMatchObject({ status: 200, body: { max_cost_per_hour: 2.5, replicas: 0 } });
    for (const limit of ["0", "1001"]) {
      expect((await rest(ctx.server.url, "GET", `/api/gpu/endpoints/api-patch/events?limit=${limit}`)).status).toBe(400);
    }
    const events = await rest<{ events: Array<{ kind: string; detail: string; actor: string; at: string }> }>(
      ctx.server.url,
      "GET",
      "/api/gpu/endpoints/api-patch/events?limit=1",
    );
    expect(events.body.events).toEqual([{ kind: "scaled", detail: "max_cost_per_hour $1/h -> $2.5/h", actor: "anonymous", at: expect.any(String) }]);
  });

  it("serves the typed client with the same rules", async () => {
    const client = gpuClient(ctx.server.url);
    const created = await client.createEndpoint({ name: "api-typed", templateName: "research", replicas: 0, maxCostPerHour: 3 });
    expect(created).toMatchObject({ name: "api-typed", state: "parked", maxCostPerHour: 3 });
    const err = await client.createEndpoint({ name: "api-typed", templateName: "research", replicas: 0, maxCostPerHour: 3 }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.Aborted);
    const deleted = await client.deleteEndpoint({ name: "api-typed" });
    expect(["deleting", "deleted"]).toContain(deleted.state);
  });
});

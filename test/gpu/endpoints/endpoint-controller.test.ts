import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rest, templateOffers, waitFor } from "../helpers.js";
import {
  createEndpoint,
  deleteAndWait,
  directoryOn,
  eventsOf,
  getEndpoint,
  liveMachines,
  readyIds,
  startSimulatedService,
  waitForEndpoint,
  watchMachines,
  type EventJson,
  type SimulatedService,
} from "./helpers.js";

// The endpoint controller end to end on the simulated marketplace (real model servers on
// loopback, real probes, real PostgreSQL), on short clocks.

let svc: SimulatedService;

beforeAll(async () => {
  svc = await startSimulatedService();
});

afterAll(async () => {
  await svc?.close();
});

const marketIdOf = async (instanceId: string) =>
  ((await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string }).market_instance_id;

const kinds = (events: EventJson[], instanceId?: string) => events.filter((e) => !instanceId || e.instance_id === instanceId).map((e) => e.kind);

const watchSpend = (name: string) => watchMachines(svc.db.knex, name);

describe("endpoint controller", () => {
  it("brings an endpoint to ready with routable replicas that serve its model", async () => {
    const created = await createEndpoint(svc.server.url, { name: "ready-one", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    expect(created).toMatchObject({ name: "ready-one", state: "starting", replicas: 2, ready_replicas: 0, url: "/endpoints/ready-one/v1" });
    const ready = await waitForEndpoint(svc.server.url, "ready-one", "ready", (e) => e.state === "ready");
    expect(ready.ready_replicas).toBe(2);
    expect(ready.instances).toHaveLength(2);
    expect(ready.cost_per_hour).toBeGreaterThan(0);
    expect(ready.cost_per_hour).toBeLessThanOrEqual(5);
    const targets = (await directoryOn(svc.db.knex).readyReplicas("ready-one"))!;
    expect(targets.map((t) => t.instanceId).sort()).toEqual(readyIds(ready).sort());
    for (const target of targets) {
      // Each replica's model server demands its own key, which the directory hands the proxy.
      expect((await fetch(`${target.url}/v1/models`)).status).toBe(401);
      expect(target.apiKey).toMatch(/^\S{32,}$/);
      const authorized = { headers: { authorization: `Bearer ${target.apiKey}` } };
      const models = (await (await fetch(`${target.url}/v1/models`, authorized)).json()) as { data: Array<{ id: string }> };
      expect(models.data[0]!.id).toBe("Qwen/Qwen2.5-Coder-7B-Instruct");
    }
    // The replicas are ordinary instances whose records and logs name the endpoint.
    const records = await svc.db.knex("gpu_instances").where({ endpoint: "ready-one" });
    expect(records).toHaveLength(2);
    const log = await svc.db.knex("GpuExecutionLog").where({ instance_id: targets[0]!.instanceId, operation: "create_instance" }).first();
    expect(log.metadata.endpoint).toBe("ready-one");
    expect((await svc.market.listInstances("")).filter((m) => m.label.endsWith("/ready-one"))).toHaveLength(2);
    const listed = await rest<{ instances: Array<{ endpoint?: string }> }>(svc.server.url, "GET", "/api/gpu/instances?status_filter=running_llm");
    expect(listed.body.instances.filter((i) => i.endpoint === "ready-one")).toHaveLength(2);
    const events = await eventsOf(svc.server.url, "ready-one");
    expect(kinds(events).filter((k) => k === "launched")).toHaveLength(2);
    expect(kinds(events).filter((k) => k === "ready")).toHaveLength(2);
    expect(events.every((e) => e.actor === "system" || e.kind === "scaled")).toBe(true);
    expect(await directoryOn(svc.db.knex).readyReplicas("no-such-endpoint")).toBeUndefined();
    const metrics = await (await fetch(`${svc.server.url}/metrics`)).text();
    expect(metrics).toContain('gpu_endpoint_instances{endpoint="ready-one",state="ready"} 2');
    expect(metrics).toContain('gpu_endpoint_instances{endpoint="ready-one",state="unhealthy"} 0');
    await deleteAndWait(svc.server.url, "ready-one", svc.db.knex);
    expect(await directoryOn(svc.db.knex).readyReplicas("ready-one")).toBeUndefined();
  });

  it("replaces a replica whose machine exits and leaves the healthy one alone", async () => {
    await createEndpoint(svc.server.url, { name: "exits", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "exits", "ready", (e) => e.state === "ready");
    const [victim, healthy] = readyIds(ready) as [string, string];
    await svc.market.exitInstance(await marketIdOf(victim));
    const healed = await waitForEndpoint(svc.server.url, "exits", "healed", (e) => e.state === "ready" && !readyIds(e).includes(victim));
    expect(readyIds(healed)).toContain(healthy);
    const replacement = readyIds(healed).find((id) => id !== healthy)!;
    // The replica's state and its `ready` event are two writes: the event may come a moment after.
    const events = await waitFor("the replacement's ready event", async () => {
      const all = await eventsOf(svc.server.url, "exits");
      return all.some((e) => e.kind === "ready" && e.instance_id === replacement) ? all : undefined;
    });
    // A probe may notice before the status sync does: not_ready, then ended.
    expect(kinds(events, victim).filter((k) => k !== "not_ready")).toEqual(["launched", "ready", "ended"]);
    expect(kinds(events, replacement)).toEqual(["launched", "ready"]);
    expect(kinds(events, healthy)).toEqual(["launched", "ready"]);
    const ended = events.findIndex((e) => e.kind === "ended");
    expect(events.findIndex((e) => e.instance_id === replacement)).toBeGreaterThan(ended);
    expect((await svc.db.knex("gpu_instances").where({ instance_id: victim }).first()).status).toBe("destroyed");
    await deleteAndWait(svc.server.url, "exits", svc.db.knex);
  });

  it("takes a replica whose model dies out of routing at once, then replaces it once unhealthy (surge first)", async () => {
    await createEndpoint(svc.server.url, { name: "model-dies", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "model-dies", "ready", (e) => e.state === "ready");
    const [victim] = readyIds(ready) as [string];
    const spend = watchSpend("model-dies");
    await svc.market.stopModelServer(await marketIdOf(victim));
    await waitFor("out of routing", async () => ((await directoryOn(svc.db.knex).readyReplicas("model-dies"))!.length === 0 ? true : undefined));
    const healed = await waitForEndpoint(svc.server.url, "model-dies", "replaced", (e) => e.state === "ready" && e.instances?.length === 1 && !readyIds(e).includes(victim));
    const replacement = readyIds(healed)[0]!;
    expect((await spend()).most).toBe(2); // the surge: replicas + 1, never more
    const events = await eventsOf(svc.server.url, "model-dies");
    expect(kinds(events, victim)).toEqual(["launched", "ready", "not_ready", "unhealthy", "replaced"]);
    // Surge: the replacement was launched before the old one was destroyed.
    const launched = events.findIndex((e) => e.kind === "launched" && e.instance_id === replacement);
    const replaced = events.findIndex((e) => e.kind === "replaced");
    expect(launched).toBeGreaterThan(events.findIndex((e) => e.kind === "unhealthy"));
    expect(replaced).toBeGreaterThan(events.findIndex((e) => e.kind === "ready" && e.instance_id === replacement));
    await deleteAndWait(svc.server.url, "model-dies", svc.db.knex);
  });

  it("keeps a replica whose host reboots for less than the unhealthy limit", async () => {
    await createEndpoint(svc.server.url, { name: "reboots", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "reboots", "ready", (e) => e.state === "ready");
    const [replica] = readyIds(ready) as [string];
    const marketId = await marketIdOf(replica);
    await svc.market.setOffline(marketId);
    await waitForEndpoint(svc.server.url, "reboots", "out of routing", (e) => e.instances?.[0]?.state === "unhealthy");
    await svc.market.restartInstance(marketId);
    const back = await waitForEndpoint(svc.server.url, "reboots", "back", (e) => e.state === "ready");
    expect(readyIds(back)).toEqual([replica]);
    const events = await eventsOf(svc.server.url, "reboots");
    expect(kinds(events)).not.toContain("unhealthy");
    expect(kinds(events, replica)).toEqual(["launched", "ready", "not_ready", "ready"]);
    await deleteAndWait(svc.server.url, "reboots", svc.db.knex);
  });

  it("scales up, then down by draining the surplus before destroying it", async () => {
    await createEndpoint(svc.server.url, { name: "scales", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "scales", "ready", (e) => e.state === "ready");
    const spend = watchSpend("scales");
    const up = await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/scales", { replicas: 3 });
    expect(up.status).toBe(200);
    expect(up.body).toMatchObject({ replicas: 3, state: "degraded" });
    await waitForEndpoint(svc.server.url, "scales", "three ready", (e) => e.state === "ready" && e.ready_replicas === 3);
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/scales", { replicas: 1 })).status).toBe(200);
    await waitForEndpoint(svc.server.url, "scales", "draining", (e) => (e.instances ?? []).some((i) => i.state === "draining"));
    const down = await waitForEndpoint(svc.server.url, "scales", "one left", (e) => e.instances?.length === 1 && e.state === "ready");
    expect(down.ready_replicas).toBe(1);
    const seen = await spend();
    expect(seen.most).toBe(3);
    expect(seen.highestSpend).toBeLessThanOrEqual(5);
    const events = await eventsOf(svc.server.url, "scales");
    expect(kinds(events).filter((k) => k === "drained")).toHaveLength(2);
    expect(events.filter((e) => e.kind === "scaled" && e.actor === "anonymous").map((e) => e.detail)).toEqual([
      expect.stringContaining("created with 1 replica"),
      "replicas 1 -> 3",
      "replicas 3 -> 1",
    ]);
    expect(await liveMachines(svc.db.knex, "scales")).toHaveLength(1);
    const parked = await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/scales", { replicas: 0 });
    expect(parked.body).toMatchObject({ state: "parked" });
    await waitFor("parked with no machine", async () => ((await liveMachines(svc.db.knex, "scales")).length === 0 ? true : undefined), 10_000);
    await deleteAndWait(svc.server.url, "scales", svc.db.knex);
  });

  it("holds a replica back when the budget leaves no room for it, and never spends past it", async () => {
    // The cheapest the template may ever rent, rented now or not: the budget fits one machine, never two.
    const everyOffer = (await svc.market.listOffers()).map((o) => ({ ...o, rentable: true }));
    const cheapest = templateOffers(everyOffer, "budget")[0]!.dphTotal;
    const budget = Math.round(cheapest * 1.5 * 10_000) / 10_000;
    await createEndpoint(svc.server.url, { name: "held", template_name: "budget", replicas: 2, max_cost_per_hour: budget });
    const spend = watchSpend("held");
    const held = await waitForEndpoint(svc.server.url, "held", "one ready, one held", (e) => e.ready_replicas === 1);
    await waitFor("budget_held", async () => (kinds(await eventsOf(svc.server.url, "held")).includes("budget_held") ? true : undefined));
    const after = await getEndpoint(svc.server.url, "held");
    expect(after.state).toBe("degraded");
    expect(after.instances, `budget ${budget}: ${JSON.stringify(await eventsOf(svc.server.url, "held"))}`).toHaveLength(1);
    expect(held.cost_per_hour).toBeLessThanOrEqual(budget);
    const events = await eventsOf(svc.server.url, "held");
    expect(kinds(events).filter((k) => k === "budget_held")).toHaveLength(1);
    expect(kinds(events).filter((k) => k === "launched")).toHaveLength(1);
    const seen = await spend();
    expect(seen.most).toBe(1);
    expect(seen.highestSpend).toBeLessThanOrEqual(budget);
    // More budget lets the held replica launch.
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/held", { max_cost_per_hour: 5 })).status).toBe(200);
    await waitForEndpoint(svc.server.url, "held", "both ready", (e) => e.state === "ready" && e.ready_replicas === 2);
    await deleteAndWait(svc.server.url, "held", svc.db.knex);
  });

  it("backs a failed launch off (10 s) with a launch_failed event, and launches again once patched", async () => {
    svc.market.failNextCreate(new Error("no capacity on the host"));
    await createEndpoint(svc.server.url, { name: "backoff", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await waitFor("launch_failed", async () => (kinds(await eventsOf(svc.server.url, "backoff")).includes("launch_failed") ? true : undefined));
    await new Promise((resolve) => setTimeout(resolve, 1000)); // 20 rounds, none of which may launch
    const events = await eventsOf(svc.server.url, "backoff");
    expect(kinds(events).filter((k) => k !== "scaled")).toEqual(["launch_failed"]);
    expect(events.find((e) => e.kind === "launch_failed")!.detail).toMatch(/failed: .*no capacity on the host.*; next launch in 10 s$/);
    expect((await getEndpoint(svc.server.url, "backoff")).state).toBe("starting");
    // A patch opens the gate at once.
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/backoff", { max_cost_per_hour: 4 })).status).toBe(200);
    await waitForEndpoint(svc.server.url, "backoff", "ready", (e) => e.state === "ready");
    await deleteAndWait(svc.server.url, "backoff", svc.db.knex);
  });

  it("deletes idempotently, destroying every machine", async () => {
    await createEndpoint(svc.server.url, { name: "gone", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "gone", "ready", (e) => e.state === "ready");
    const first = await rest<{ state: string }>(svc.server.url, "DELETE", "/api/gpu/endpoints/gone");
    expect(["deleting", "deleted"]).toContain(first.body.state);
    await waitForEndpoint(svc.server.url, "gone", "deleted", (e) => e.state === "deleted");
    const again = await rest<{ state: string }>(svc.server.url, "DELETE", "/api/gpu/endpoints/gone");
    expect(again).toMatchObject({ status: 200, body: { state: "deleted" } });
    expect(await liveMachines(svc.db.knex, "gone")).toEqual([]);
    const machineIds = (await svc.db.knex("gpu_instances").where({ endpoint: "gone" }).pluck("market_instance_id")) as string[];
    expect(machineIds.length).toBeGreaterThanOrEqual(2);
    expect((await svc.market.listInstances("")).filter((m) => machineIds.includes(m.id))).toEqual([]);
    const listed = await rest<{ endpoints?: unknown[] }>(svc.server.url, "GET", "/api/gpu/endpoints");
    expect(listed.body.endpoints ?? []).toEqual([]);
    // The name is free again.
    await createEndpoint(svc.server.url, { name: "gone", template_name: "budget", replicas: 0, max_cost_per_hour: 1 });
    expect((await getEndpoint(svc.server.url, "gone")).state).toBe("parked");
  });
});

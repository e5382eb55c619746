import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OutcomeUnknownError } from "../../../src/errors.js";
import { rest, waitFor } from "../helpers.js";
import {
  createEndpoint,
  deleteAndWait,
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

// What a review of the controller found, each on the real service (simulated marketplace, real
// model servers and probes, real PostgreSQL): a lowered budget is enforced, scaling never cuts a
// healthy replica, the launch backoff counts what it should, and events say what happened.

let svc: SimulatedService;

beforeAll(async () => {
  // A drain long enough to scale back up during it; a creation grace short enough to settle an unknown create.
  svc = await startSimulatedService({}, { GPU_ENDPOINT_DRAIN_MS: "2000", GPU_CREATION_GRACE_MS: "1000" });
});

afterAll(async () => {
  await svc?.close();
});

const recordOf = async (instanceId: string) =>
  (await svc.db.knex("gpu_instances").where({ instance_id: instanceId }).first()) as { market_instance_id: string; cost_per_hour: number };
const endpointRow = async (name: string) =>
  (await svc.db.knex("gpu_endpoints").where({ name }).whereNot({ phase: "deleted" }).first()) as { launch_failures: number; next_launch_at: Date | null; ever_ready: boolean };
const kinds = (events: EventJson[], instanceId?: string) => events.filter((e) => !instanceId || e.instance_id === instanceId).map((e) => e.kind);
const settle = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("endpoints under faults", () => {
  it("sheds the costliest replica when its budget is lowered below what runs, draining it first", async () => {
    await createEndpoint(svc.server.url, { name: "lowered", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "lowered", "ready", (e) => e.state === "ready");
    const [costly, cheap] = [...ready.instances!].sort((a, b) => b.cost_per_hour - a.cost_per_hour);
    const budget = Math.round((cheap!.cost_per_hour + 0.0001) * 10_000) / 10_000;
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/lowered", { max_cost_per_hour: budget })).status).toBe(200);
    await waitForEndpoint(svc.server.url, "lowered", "the costly replica draining", (e) => e.instances!.some((i) => i.instance_id === costly!.instance_id && i.state === "draining"));
    const after = await waitForEndpoint(svc.server.url, "lowered", "within its budget", (e) => e.instances!.length === 1, 10_000);
    expect(after).toMatchObject({ state: "degraded", ready_replicas: 1 });
    expect(readyIds(after)).toEqual([cheap!.instance_id]);
    const spend = watchMachines(svc.db.knex, "lowered");
    await settle(1000); // twenty rounds: nothing is launched into a budget that has no room
    expect((await spend()).highestSpend).toBeLessThanOrEqual(budget);
    const events = await eventsOf(svc.server.url, "lowered");
    expect(kinds(events, costly!.instance_id)).toEqual(["launched", "ready", "scaled", "drained"]);
    expect(events.find((e) => e.kind === "scaled" && e.instance_id === costly!.instance_id)!.detail).toContain(`over its budget of $${budget}/h`);
    expect(kinds(events).filter((k) => k === "budget_held")).toHaveLength(1);
    expect(kinds(events).filter((k) => k === "launched")).toHaveLength(2);
    await deleteAndWait(svc.server.url, "lowered", svc.db.knex);
  });

  it("takes a draining replica back when scaled up during its drain, launching nothing", async () => {
    await createEndpoint(svc.server.url, { name: "takes-back", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "takes-back", "ready", (e) => e.state === "ready");
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/takes-back", { replicas: 1 })).status).toBe(200);
    const draining = await waitForEndpoint(svc.server.url, "takes-back", "draining", (e) => e.instances!.some((i) => i.state === "draining"));
    const drained = draining.instances!.find((i) => i.state === "draining")!.instance_id;
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/takes-back", { replicas: 2 })).status).toBe(200);
    const back = await waitForEndpoint(svc.server.url, "takes-back", "both ready again", (e) => e.state === "ready" && e.ready_replicas === 2);
    expect(readyIds(back).sort()).toEqual(readyIds(ready).sort());
    await settle(2500); // past the drain time: the replica taken back stays
    expect(readyIds(await getEndpoint(svc.server.url, "takes-back")).sort()).toEqual(readyIds(ready).sort());
    const events = await eventsOf(svc.server.url, "takes-back");
    expect(kinds(events).filter((k) => k === "launched")).toHaveLength(2);
    expect(kinds(events, drained)).toEqual(["launched", "ready", "scaled", "scaled"]);
    expect(events.filter((e) => e.instance_id === drained).at(-1)!.detail).toContain("taken back from draining");
    await deleteAndWait(svc.server.url, "takes-back", svc.db.knex);
  });

  it("leaves the launch backoff as it was when a replica comes back into routing after a blip", async () => {
    await createEndpoint(svc.server.url, { name: "blip", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "blip", "ready", (e) => e.state === "ready");
    const [replica] = readyIds(ready) as [string];
    // The round that saw it ready ends the launch backoff after it shows ready: wait for that write first.
    await waitFor("the first readiness recorded", async () => ((await endpointRow("blip")).ever_ready ? true : undefined), 10_000);
    // Launches have failed three times in a row, and the next may go in ten minutes.
    const nextLaunchAt = new Date(Date.now() + 600_000);
    await svc.db.knex("gpu_endpoints").where({ name: "blip" }).update({ launch_failures: 3, next_launch_at: nextLaunchAt });
    const marketId = (await recordOf(replica)).market_instance_id;
    await svc.market.setOffline(marketId);
    await waitForEndpoint(svc.server.url, "blip", "out of routing", (e) => e.instances?.[0]?.state === "unhealthy");
    await svc.market.restartInstance(marketId);
    await waitForEndpoint(svc.server.url, "blip", "back in routing", (e) => e.state === "ready");
    expect(kinds(await eventsOf(svc.server.url, "blip"), replica)).toEqual(["launched", "ready", "not_ready", "ready"]);
    const row = await endpointRow("blip");
    expect(row.launch_failures).toBe(3);
    expect(row.next_launch_at?.getTime()).toBe(nextLaunchAt.getTime());
    await deleteAndWait(svc.server.url, "blip", svc.db.knex);
  });

  it("counts a launch whose outcome was unknown once toward the backoff, when it turns out failed", async () => {
    svc.market.failNextCreate(new OutcomeUnknownError("the marketplace did not answer the create in time"));
    await createEndpoint(svc.server.url, { name: "unknown", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await waitFor("launch_failed", async () => (kinds(await eventsOf(svc.server.url, "unknown")).includes("launch_failed") ? true : undefined), 15_000);
    await settle(1500); // the reconciler has failed the record and the plan has removed it by now
    const events = await eventsOf(svc.server.url, "unknown");
    expect(kinds(events).filter((k) => k !== "scaled")).toEqual(["launch_failed"]);
    expect(events.find((e) => e.kind === "launch_failed")!.detail).toMatch(/next launch in 10 s$/);
    expect((await endpointRow("unknown")).launch_failures).toBe(1);
    await deleteAndWait(svc.server.url, "unknown", svc.db.knex);
  });

  it("tells a scale-down whose destroy the marketplace confirmed later as drained, not as a machine lost outside", async () => {
    await createEndpoint(svc.server.url, { name: "late-destroy", template_name: "budget", replicas: 2, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "late-destroy", "ready", (e) => e.state === "ready");
    svc.market.failNextDestroy();
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/late-destroy", { replicas: 1 })).status).toBe(200);
    const draining = await waitForEndpoint(svc.server.url, "late-destroy", "draining", (e) => e.instances!.some((i) => i.state === "draining"));
    const victim = draining.instances!.find((i) => i.state === "draining")!.instance_id;
    await waitForEndpoint(svc.server.url, "late-destroy", "one left", (e) => e.instances!.length === 1, 10_000);
    await waitFor("the drained event", async () => (kinds(await eventsOf(svc.server.url, "late-destroy"), victim).includes("drained") ? true : undefined));
    expect(kinds(await eventsOf(svc.server.url, "late-destroy"), victim)).toEqual(["launched", "ready", "scaled", "drained"]);
    await deleteAndWait(svc.server.url, "late-destroy", svc.db.knex);
  });

  it("tells a replica destroyed before it was ready as scaled in, with no launch failure, when its destroy is confirmed later", async () => {
    await createEndpoint(svc.server.url, { name: "never-ready", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    const ready = await waitForEndpoint(svc.server.url, "never-ready", "ready", (e) => e.state === "ready");
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/never-ready", { replicas: 2 })).status).toBe(200);
    const second = await waitFor("the second replica's machine", async () => {
      const rows = (await svc.db.knex("gpu_instances").where({ endpoint: "never-ready" }).whereNotNull("market_instance_id")) as Array<{ instance_id: string; market_instance_id: string }>;
      return rows.find((r) => !readyIds(ready).includes(r.instance_id));
    });
    await svc.market.stopModelServer(second.market_instance_id); // it never becomes ready
    svc.market.failNextDestroy();
    expect((await rest(svc.server.url, "PATCH", "/api/gpu/endpoints/never-ready", { replicas: 1 })).status).toBe(200);
    await waitForEndpoint(svc.server.url, "never-ready", "one left", (e) => e.instances!.length === 1, 10_000);
    await waitFor("its event", async () => (kinds(await eventsOf(svc.server.url, "never-ready"), second.instance_id).length > 1 ? true : undefined));
    await settle(500);
    const events = await eventsOf(svc.server.url, "never-ready");
    expect(kinds(events, second.instance_id)).toEqual(["launched", "scaled"]);
    expect(kinds(events)).not.toContain("launch_failed");
    expect(kinds(events)).not.toContain("ended");
    await deleteAndWait(svc.server.url, "never-ready", svc.db.knex);
  });

  it("shows a deleting endpoint with no ready replica: its replicas are being destroyed", async () => {
    await createEndpoint(svc.server.url, { name: "deleting", template_name: "budget", replicas: 1, max_cost_per_hour: 5 });
    await waitForEndpoint(svc.server.url, "deleting", "ready", (e) => e.state === "ready");
    svc.market.failNextDestroy();
    const deleting = await rest<{ state: string; ready_replicas?: number }>(svc.server.url, "DELETE", "/api/gpu/endpoints/deleting");
    expect(deleting.body.state).toBe("deleting");
    expect(deleting.body.ready_replicas ?? 0).toBe(0);
    await waitForEndpoint(svc.server.url, "deleting", "deleted", (e) => e.state === "deleted");
    expect(await liveMachines(svc.db.knex, "deleting")).toEqual([]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { comingOf, createEndpointDirectory } from "../../../src/gpu/endpoints/resource/endpoint-directory.js";
import { EndpointStore, type AutoscaleSettings } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { DEFAULT_CAPACITY } from "../../../src/gpu/endpoints/resource/endpoint-capacity.js";
import { InstanceStore } from "../../../src/gpu/store/instance-store.js";
import { createKnex } from "../../../src/db/knex.js";
import type { EndpointDirectory } from "../../../src/module.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";

// The directory's answer when no replica is ready: whether one is coming (the proxy holds the
// request) or why not (503 at once), from what PostgreSQL holds.

let db: TestDatabase;
let store: EndpointStore;
let directory: EndpointDirectory;

beforeAll(async () => {
  db = await createTestDatabase();
  store = EndpointStore.create({ knex: db.knex });
  directory = createEndpointDirectory({ ctx: { instances: InstanceStore.create({ knex: db.knex }) }, endpoints: store }, 0);
});

afterAll(async () => {
  await db?.drop();
});

const create = (name: string, replicas: number) => store.insert({ name, templateName: "budget", replicas, maxCostPerHour: 5, customConfig: {}, autoscale: null, capacity: { ...DEFAULT_CAPACITY } });

describe("endpoint directory: is a replica coming?", () => {
  it("a starting endpoint (replicas 1, a launch allowed) is coming, under its id", async () => {
    const endpoint = await create("starting", 1);
    expect(await directory.route("starting")).toEqual({ endpointId: endpoint.id, targets: [], coming: true, routing: "prefix" });
  });

  it("carries the endpoint's routing to the proxy", async () => {
    const endpoint = await create("least", 1);
    await store.update(endpoint.id, { routing: "least_outstanding" });
    expect(await directory.route("least")).toMatchObject({ routing: "least_outstanding" });
  });

  it("a parked endpoint (replicas 0) is not: 503 at once", async () => {
    await create("parked", 0);
    expect(await directory.route("parked")).toMatchObject({ targets: [], coming: false, refusal: "parked" });
  });

  it("a deleting endpoint is not; a deleted one is unknown", async () => {
    const endpoint = await create("going", 1);
    await store.markDeleting(endpoint.id);
    expect(await directory.route("going")).toMatchObject({ coming: false, refusal: "deleting" });
    await store.markDeleted(endpoint.id);
    expect(await directory.route("going")).toBeUndefined();
  });

  it("one held by its budget is coming only while a replica is on its way", async () => {
    const endpoint = await create("budget", 2);
    await store.setControl(endpoint.id, { budgetHeld: true });
    expect(await directory.route("budget")).toMatchObject({ coming: false, refusal: "budget" });
    await store.replicas.insert(endpoint.id, "gpu-on-its-way");
    expect(await directory.route("budget")).toMatchObject({ coming: true });
  });
});

describe("endpoint directory: the database away", () => {
  it("routes an endpoint from its last answer while the database cannot be read, for staleMs at most", async () => {
    await create("remembered", 1);
    // A pool of its own, destroyed as the database going away: every read fails from then on.
    const knex = createKnex(db.url, { poolMax: 2 });
    const away = createEndpointDirectory({ ctx: { instances: InstanceStore.create({ knex }) }, endpoints: EndpointStore.create({ knex }) }, 0, 300);
    const known = await away.route("remembered");
    expect(known).toMatchObject({ coming: true });
    await knex.destroy();
    expect(await away.route("remembered")).toEqual(known);
    // Never read: nothing to route it from.
    await expect(away.route("starting")).rejects.toThrow();
    await new Promise((resolve) => setTimeout(resolve, 350));
    await expect(away.route("remembered")).rejects.toThrow();
  });
});

describe("comingOf", () => {
  const autoscale: AutoscaleSettings = { minReplicas: 0, maxReplicas: 2, targetInFlight: 4, scaleUpAfterS: 30, scaleDownAfterS: 600 };

  it("holds for an idle autoscaled endpoint (a request wakes it), not for a parked one", () => {
    expect(comingOf({ replicas: 0, autoscale, budgetHeld: false }, [])).toEqual({ coming: true });
    expect(comingOf({ replicas: 0, autoscale: null, budgetHeld: false }, [])).toEqual({ coming: false, refusal: "parked" });
  });

  it("does not hold for an autoscaled endpoint whose budget holds every launch back", () => {
    expect(comingOf({ replicas: 0, autoscale, budgetHeld: true }, [])).toEqual({ coming: false, refusal: "budget" });
  });

  it("holds for a fixed endpoint whose replicas all failed while a replacement may come", () => {
    expect(comingOf({ replicas: 2, autoscale: null, budgetHeld: false }, [])).toEqual({ coming: true });
  });
});

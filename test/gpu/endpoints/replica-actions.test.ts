import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config.js";
import { newRound, type RoundDeps } from "../../../src/gpu/endpoints/control/control-round.js";
import { drained, scaleIn } from "../../../src/gpu/endpoints/control/replica-actions.js";
import { DEFAULT_CAPACITY } from "../../../src/gpu/endpoints/resource/endpoint-capacity.js";
import { EndpointEventStore } from "../../../src/gpu/endpoints/resource/endpoint-events.js";
import { EndpointStore, type EndpointRecord } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import type { ReplicaFacts } from "../../../src/gpu/endpoints/replicas/replica-state.js";
import { createSimulatedMarketplace, type SimulatedMarketplace } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { gpuContextOn } from "../helpers.js";

// The controller's actions on one replica, on the real PostgreSQL, where the round's facts and
// the rows can part: a probe makes a replica ready (and routed) while the round that read it
// decided to destroy it before it was ready; a drain ends while requests are still in flight.

let db: TestDatabase;
let market: SimulatedMarketplace;
let deps: RoundDeps;
const cut: Array<[string, number]> = [];

beforeAll(async () => {
  db = await createTestDatabase();
  market = createSimulatedMarketplace({ creatingMs: 100, loadingMs: 100, modelServerStartMs: 100 });
  const endpoints = EndpointStore.create({ knex: db.knex });
  deps = {
    ctx: gpuContextOn(db.knex, market),
    endpoints,
    events: EndpointEventStore.create({ knex: db.knex }),
    probe: async () => false,
    settings: { ...loadConfig({}).gpu.endpoints, missingGraceMs: 60_000 },
    confirmLead: async () => true,
    onDrainCut: (endpoint, requests) => void cut.push([endpoint, requests]),
  };
});

afterAll(async () => {
  await market?.close();
  await db?.drop();
});

async function endpointWithReplica(name: string, instanceId: string): Promise<{ endpoint: EndpointRecord; facts: ReplicaFacts[] }> {
  const endpoint = await deps.endpoints.insert({ name, templateName: "budget", replicas: 1, maxCostPerHour: 5, customConfig: {}, autoscale: null, capacity: { ...DEFAULT_CAPACITY } });
  await deps.endpoints.replicas.insert(endpoint.id, instanceId);
  const facts = (await deps.endpoints.replicas.listOf(endpoint.id)).map((row) => ({ row, record: null }));
  return { endpoint, facts };
}

const eventsOf = async (endpoint: EndpointRecord) => (await deps.events.list(endpoint.id, 10)).map((e) => `${e.kind}: ${e.detail}`);

describe("a replica scaled in before it was ready", () => {
  it("is destroyed while it has never been ready", async () => {
    const { endpoint, facts } = await endpointWithReplica("never-ready", "gpu-9001");
    await scaleIn(deps, endpoint, newRound(facts), { kind: "scale_in", instanceId: "gpu-9001", reason: "scale down to 0" });
    expect(await deps.endpoints.replicas.listOf(endpoint.id)).toEqual([]);
    expect(await eventsOf(endpoint)).toEqual(["scaled: gpu-9001 destroyed before it was ready (scale down to 0)"]);
  });

  it("drains instead when a probe made it ready after its round read it", async () => {
    const { endpoint, facts } = await endpointWithReplica("ready-meanwhile", "gpu-9002");
    // The probe loop, between the round's read and its action.
    await deps.endpoints.replicas.updateProbe("gpu-9002", { successes: 2, readySince: new Date() });
    await scaleIn(deps, endpoint, newRound(facts), { kind: "scale_in", instanceId: "gpu-9002", reason: "scale down to 0" });
    const [row] = await deps.endpoints.replicas.listOf(endpoint.id);
    expect(row).toMatchObject({ instanceId: "gpu-9002", draining: true, destroyingAt: null });
    expect(await eventsOf(endpoint)).toEqual(["scaled: gpu-9002 drains for 30 s (scale down to 0; it became ready meanwhile)"]);
  });
});

describe("a drain that ends with requests in flight", () => {
  it("is logged, counted and told in its event", async () => {
    const { endpoint, facts } = await endpointWithReplica("long-streams", "gpu-9003");
    await drained(deps, endpoint, newRound(facts), { kind: "drained", instanceId: "gpu-9003", inFlight: 2 });
    expect(cut).toEqual([["long-streams", 2]]);
    expect(await eventsOf(endpoint)).toEqual(["drained: gpu-9003 drained and destroyed (2 request(s) still in flight after 30 s are cut)"]);
  });
});

import type { Knex } from "knex";
import { expect } from "vitest";
import { createSimulatedMarketplace, type SimulatedMarketplace, type SimulatedMarketplaceOptions } from "../../../src/gpu/marketplace/simulated/simulated.js";
import { createTestElasticsearch } from "../../support/elasticsearch.js";
import { createTestDatabase, type TestDatabase } from "../../support/postgres.js";
import { startTestServer, type TestServer } from "../../support/server.js";
import { createEndpointDirectory } from "../../../src/gpu/endpoints/resource/endpoint-directory.js";
import { EndpointStore } from "../../../src/gpu/endpoints/resource/endpoint-store.js";
import { InstanceStore } from "../../../src/gpu/store/instance-store.js";
import type { RouteTarget } from "../../../src/module.js";
import { rest, waitFor } from "../helpers.js";

// REST helpers for the endpoint tests: the endpoint and its events as clients see them.

export interface EndpointJson {
  name: string;
  template_name: string;
  replicas: number;
  max_cost_per_hour: number;
  state: string;
  ready_replicas: number;
  on_demand_replicas?: number;
  interruptible_replicas?: number;
  capacity?: { interruptible?: boolean; markets?: string[] };
  cost_per_hour: number;
  total_cost: number;
  url: string;
  created_at: string;
  instances?: Array<{ instance_id: string; state: string; url: string; cost_per_hour: number; ready_since?: string; failed_probes: number }>;
}

export interface EventJson {
  at: string;
  kind: string;
  instance_id?: string;
  detail: string;
  actor: string;
}

/** The service on a database of its own and the simulated marketplace: what most endpoint tests run on. */
export interface SimulatedService {
  db: TestDatabase;
  market: SimulatedMarketplace;
  server: TestServer;
  close(): Promise<void>;
}

/**
 * Starts the service on the simulated marketplace (machines up in about 0.3 s unless `market`
 * says otherwise) with FAST_ENDPOINT_ENV and `env` over it.
 */
export async function startSimulatedService(market: Partial<SimulatedMarketplaceOptions> = {}, env: Record<string, string> = {}): Promise<SimulatedService> {
  const db = await createTestDatabase();
  const marketplace = createSimulatedMarketplace({ creatingMs: 100, loadingMs: 100, modelServerStartMs: 100, ...market });
  const server = await startTestServer({ knex: db.knex, elasticsearch: createTestElasticsearch(), marketplace, env: { ...FAST_ENDPOINT_ENV, ...env } });
  return {
    db,
    market: marketplace,
    server,
    async close() {
      await server.close();
      await marketplace.close();
      await db.drop();
    },
  };
}

/** Deletes the endpoint and waits until it is deleted; with `knex`, no machine of it may be left in the database then. */
export async function deleteAndWait(baseUrl: string, name: string, knex?: Knex): Promise<void> {
  expect((await rest(baseUrl, "DELETE", `/api/gpu/endpoints/${name}`)).status).toBe(200);
  await waitForEndpoint(baseUrl, name, "deleted", (e) => e.state === "deleted", 30_000);
  if (knex !== undefined) expect(await liveMachines(knex, name)).toEqual([]);
}

/** Clocks short enough for tests: probes every 50 ms, unhealthy after 1.5 s of failures, a look for a cheaper bid every second. */
export const FAST_ENDPOINT_ENV = {
  GPU_STATUS_SYNC_MS: "50",
  GPU_STATUS_CACHE_MS: "0",
  GPU_PROBE_TIMEOUT_MS: "500",
  GPU_ENDPOINT_PROBE_MS: "50",
  GPU_ENDPOINT_READY_AFTER: "2",
  GPU_ENDPOINT_UNHEALTHY_MS: "1500",
  GPU_ENDPOINT_START_TIMEOUT_MS: "20000",
  GPU_ENDPOINT_DRAIN_MS: "300",
  GPU_ENDPOINT_MIX_RECHECK_MS: "1000",
};

export async function createEndpoint(baseUrl: string, body: Record<string, unknown>): Promise<EndpointJson> {
  const res = await rest<EndpointJson>(baseUrl, "POST", "/api/gpu/endpoints", body);
  if (res.status !== 200) throw new Error(`create answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
}

export async function getEndpoint(baseUrl: string, name: string): Promise<EndpointJson> {
  const res = await rest<EndpointJson>(baseUrl, "GET", `/api/gpu/endpoints/${name}`);
  if (res.status !== 200) throw new Error(`get answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
}

/** Oldest first, unlike the API, so that a test reads them in the order they happened. */
export async function eventsOf(baseUrl: string, name: string): Promise<EventJson[]> {
  const res = await rest<{ events?: EventJson[] }>(baseUrl, "GET", `/api/gpu/endpoints/${name}/events?limit=1000`);
  return [...(res.body.events ?? [])].reverse();
}

export function waitForEndpoint(baseUrl: string, name: string, what: string, test: (e: EndpointJson) => boolean, timeoutMs = 20_000) {
  return waitFor(
    `${name}: ${what}`,
    async () => {
      const endpoint = await getEndpoint(baseUrl, name);
      return test(endpoint) ? endpoint : undefined;
    },
    timeoutMs,
  );
}

export function readyIds(endpoint: EndpointJson): string[] {
  return (endpoint.instances ?? []).filter((i) => i.state === "ready").map((i) => i.instance_id);
}

/**
 * The proxy's view of the endpoints, built as the service builds it, on the test's database:
 * an endpoint's ready replicas (undefined: unknown or deleted).
 */
export function directoryOn(knex: Knex): { readyReplicas(name: string): Promise<RouteTarget[] | undefined> } {
  const directory = createEndpointDirectory({ ctx: { instances: InstanceStore.create({ knex }) }, endpoints: EndpointStore.create({ knex }) }, 0);
  return { readyReplicas: async (name) => (await directory.route(name))?.targets };
}

/** Instances of the endpoint's template that are live in the database. */
export async function liveMachines(knex: Knex, endpoint: string): Promise<Array<{ instance_id: string; status: string }>> {
  return knex("gpu_instances").where({ endpoint }).whereNotIn("status", ["destroyed", "failed"]).select("instance_id", "status");
}

/**
 * Samples an endpoint's billed machines (records not destroyed or failed) every 10 ms until
 * stopped: the most machines and the highest summed cost_per_hour seen at any one time.
 */
export function watchMachines(knex: Knex, endpoint: string): () => Promise<{ most: number; highestSpend: number }> {
  let most = 0;
  let highestSpend = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const live = (await knex("gpu_instances").where({ endpoint }).whereNotIn("status", ["destroyed", "failed"]).select("cost_per_hour")) as Array<{
        cost_per_hour: number;
      }>;
      most = Math.max(most, live.length);
      highestSpend = Math.max(highestSpend, live.reduce((sum, r) => sum + r.cost_per_hour, 0));
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  return async () => {
    running = false;
    await loop;
    return { most, highestSpend };
  };
}

/**
 * Streamed chat completions through the proxy, `inFlight` at a time, until the returned function
 * is called: answers by outcome (complete with [DONE], failed before the answer started, cut).
 */
export function streamLoad(baseUrl: string, name: string, inFlight: number): () => Promise<{ complete: number; failedBeforeStart: number; cut: number }> {
  const tally = { complete: 0, failedBeforeStart: 0, cut: 0 };
  let running = true;
  const one = async () => {
    while (running) {
      const res = await fetch(`${baseUrl}/endpoints/${name}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 12, stream: true }),
      }).catch(() => undefined);
      if (!res || res.status !== 200) {
        tally.failedBeforeStart++;
        continue;
      }
      const text = await res.text().catch(() => "");
      if (text.endsWith("data: [DONE]\n\n")) tally.complete++;
      else tally.cut++;
    }
  };
  const loops = Array.from({ length: inFlight }, one);
  return async () => {
    running = false;
    await Promise.all(loops);
    return tally;
  };
}

/** Samples the endpoint's ready replicas every 20 ms until stopped: the fewest seen. */
export function watchFewestReady(baseUrl: string, name: string): () => Promise<number> {
  let fewest = Infinity;
  let running = true;
  const loop = (async () => {
    while (running) {
      fewest = Math.min(fewest, (await getEndpoint(baseUrl, name)).ready_replicas);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  return async () => {
    running = false;
    await loop;
    return fewest;
  };
}

import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { Knex } from "knex";
import pino from "pino";
import { GpuService } from "../../gen/gpu/v1/gpu_service_pb.js";
import { findTemplate } from "../../src/gpu/creation/templates.js";
import { resolveDeployment } from "../../src/gpu/deployment.js";
import type { GpuContext } from "../../src/gpu/gpu-context.js";
import type { Marketplace, MarketOffer } from "../../src/gpu/marketplace/port.js";
import { ExecutionLogStore } from "../../src/gpu/store/execution-log-store.js";
import { InstanceStore } from "../../src/gpu/store/instance-store.js";

// Small helpers for the GPU end-to-end tests: REST calls that return status and JSON, the
// generated Connect client, polling until a condition holds, the offers a template may rent, and
// the context a creation runs in (for what no REST call asks, such as an interruptible creation).

export interface RestAnswer<T = Record<string, unknown>> {
  status: number;
  body: T;
}

export async function rest<T = Record<string, unknown>>(
  baseUrl: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<RestAnswer<T>> {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as T };
}

export function gpuClient(baseUrl: string): Client<typeof GpuService> {
  return createClient(GpuService, createConnectTransport({ baseUrl, httpVersion: "1.1" }));
}

/** Polls `probe` until it returns a value that is not undefined, or fails after timeoutMs. */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/**
 * The offers a template may rent, cheapest first as the service orders them: rentable, within its
 * RAM floor and price cap, and a machine its model runs on (a GPU count it splits over, enough GPU
 * memory in all, the image's CUDA, a direct port; a fact an offer leaves out does not exclude it).
 */
export function templateOffers<T extends MarketOffer>(offers: readonly T[], name: string): T[] {
  const c = findTemplate(name)!.config!;
  return offers
    .filter(
      (o) =>
        o.rentable &&
        o.gpuRam >= c.minGpuRam &&
        o.dphTotal <= c.maxPrice &&
        c.tensorParallelSizes.includes(o.numGpus) &&
        o.numGpus * o.gpuRam >= c.minTotalGpuRam &&
        (o.cudaMaxGood ?? c.minCuda) >= c.minCuda &&
        (o.directPortCount ?? 1) >= 1,
    )
    .sort((a, b) => a.dphTotal - b.dphTotal || a.id.localeCompare(b.id));
}

/** The context the GPU service's parts share, on a test database and a marketplace: no fleet cap, no probe. */
export function gpuContextOn(knex: Knex, marketplace: Marketplace): GpuContext {
  return {
    knex,
    logger: pino({ level: "silent" }),
    instances: InstanceStore.create({ knex }),
    logs: ExecutionLogStore.create({ knex }),
    marketplace,
    deployment: () => resolveDeployment(knex, undefined),
    probe: async () => false,
    inFlight: new Set(),
    maxFleetDph: undefined,
  };
}

import { Counter, Gauge, type Registry } from "prom-client";
import type { GpuContext } from "../../gpu-context.js";
import type { EndpointStore } from "./endpoint-store.js";
import { replicaFactsOf } from "../replicas/replica-facts.js";
import { REPLICA_STATES, shownState } from "../replicas/replica-state.js";

/** What the controller counts as it acts. */
export interface EndpointControlMetrics {
  /** Requests still in flight on a replica whose drain ended: they are cut. */
  drainCut(endpoint: string, requests: number): void;
}

/**
 * `gpu_endpoint_target_replicas{endpoint}`: the count each active endpoint keeps.
 * `gpu_endpoint_instances{endpoint,state}`: each endpoint's replicas by state, read from the
 * database at scrape time (every state shown, zeros included, so a drop to zero is visible). As in
 * the endpoint's status, a launch counts once its record is written.
 * `gpu_endpoint_drain_cut_requests_total{endpoint}`: requests a drain's end cut (longer than
 * GPU_ENDPOINT_DRAIN_MS).
 */
export function registerEndpointMetrics(registry: Registry, deps: { ctx: Pick<GpuContext, "instances">; endpoints: EndpointStore }): EndpointControlMetrics {
  const drainCut = new Counter({
    name: "gpu_endpoint_drain_cut_requests_total",
    help: "Requests still in flight on a replica when its drain ended (GPU_ENDPOINT_DRAIN_MS): cut by its destroy",
    labelNames: ["endpoint"],
    registers: [registry],
  });
  new Gauge({
    name: "gpu_endpoint_instances",
    help: "Replicas of each endpoint by state (provisioning, starting, ready, unhealthy, draining)",
    labelNames: ["endpoint", "state"],
    registers: [registry],
    async collect() {
      this.reset();
      // A scrape while the database is away shows no samples rather than failing /metrics.
      const live = await deps.endpoints.listLive().catch(() => []);
      for (const endpoint of live) {
        const facts = await replicaFactsOf(deps, endpoint).catch(() => undefined);
        if (!facts) continue;
        for (const state of REPLICA_STATES) this.set({ endpoint: endpoint.name, state }, 0);
        for (const f of facts) if (f.record) this.inc({ endpoint: endpoint.name, state: shownState(f) });
      }
    },
  });
  new Gauge({
    name: "gpu_endpoint_target_replicas",
    help: "Replicas each endpoint keeps: the caller's count, or its autoscaler's target",
    labelNames: ["endpoint"],
    registers: [registry],
    async collect() {
      this.reset();
      for (const endpoint of await deps.endpoints.listLive().catch(() => [])) {
        if (endpoint.phase === "active") this.set({ endpoint: endpoint.name }, endpoint.replicas);
      }
    },
  });
  return { drainCut: (endpoint, requests) => drainCut.inc({ endpoint }, requests) };
}

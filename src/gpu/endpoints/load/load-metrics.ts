import { Gauge, type Registry } from "prom-client";
import type { EndpointStore } from "../resource/endpoint-store.js";
import type { LoadStore } from "./load-store.js";

// `gpu_endpoint_load{endpoint}` and `gpu_endpoint_held{endpoint}`: each live endpoint's load summed
// over every service process, read from the database at scrape time (any process shows the same).

export function registerLoadMetrics(registry: Registry, deps: { endpoints: EndpointStore; load: LoadStore }): void {
  // One read serves both gauges of a scrape.
  let reading: { at: number; sums: Promise<Array<{ name: string; inFlight: number; held: number }>> } | undefined;
  const sums = () => {
    if (reading === undefined || Date.now() - reading.at > 500) {
      const read = async () => {
        const live = await deps.endpoints.listLive();
        const loads = await deps.load.readLoad(live.map((e) => e.id));
        return live.map((e) => ({ name: e.name, inFlight: loads.get(e.id)!.inFlight, held: loads.get(e.id)!.held }));
      };
      // A scrape while the database is away shows no samples rather than failing /metrics.
      reading = { at: Date.now(), sums: read().catch(() => []) };
    }
    return reading.sums;
  };
  new Gauge({
    name: "gpu_endpoint_load",
    help: "Requests in flight through the endpoint proxy plus requests held, summed over every service process",
    labelNames: ["endpoint"],
    registers: [registry],
    async collect() {
      this.reset();
      for (const s of await sums()) this.set({ endpoint: s.name }, s.inFlight + s.held);
    },
  });
  new Gauge({
    name: "gpu_endpoint_held",
    help: "Requests waiting in the endpoint proxy for a ready replica, summed over every service process",
    labelNames: ["endpoint"],
    registers: [registry],
    async collect() {
      this.reset();
      for (const s of await sums()) this.set({ endpoint: s.name }, s.held);
    },
  });
}

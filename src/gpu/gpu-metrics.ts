import { Gauge, type Registry } from "prom-client";
import type { StatisticsStore } from "./store/statistics-store.js";

/**
 * `gpu_instances{status}`: stored instances by status, read at scrape time from the statistics
 * summary (one small aggregate query, never a scan of the records).
 */
export function registerGpuMetrics(registry: Registry, statistics: StatisticsStore): void {
  new Gauge({
    name: "gpu_instances",
    help: "Stored GPU instances by status",
    labelNames: ["status"],
    registers: [registry],
    async collect() {
      this.reset();
      // A scrape while the database is away shows no samples rather than failing /metrics.
      const stats = await statistics.statistics().catch(() => undefined);
      for (const [status, count] of Object.entries(stats?.statusDistribution ?? {})) this.set({ status }, count);
    },
  });
}

import { Gauge, type Registry } from "prom-client";
import type { SyncLeader } from "./lifecycle/sync-leader.js";
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

/**
 * `gpu_sync_leader`: 1 while this process holds the sync leadership, else 0 (summed over the
 * processes on one database: 1; 0 means nobody runs the sync, the reconciler, the money limits
 * and the endpoint controller). `gpu_sync_leader_last_round_timestamp_seconds`: when a round
 * gated on the leadership last started here (no sample before the first); on the leader its age
 * stays within an interval, an older one means the rounds stopped.
 */
export function registerLeadershipMetrics(registry: Registry, leader: SyncLeader): void {
  new Gauge({
    name: "gpu_sync_leader",
    help: "1 while this process holds the GPU sync leadership",
    registers: [registry],
    collect() {
      this.set(leader.status().leading ? 1 : 0);
    },
  });
  new Gauge({
    name: "gpu_sync_leader_last_round_timestamp_seconds",
    help: "Unix time at which a round gated on the GPU sync leadership last started in this process",
    registers: [registry],
    collect() {
      this.reset();
      const at = leader.status().lastRoundAt;
      if (at) this.set(at.getTime() / 1000);
    },
  });
}

import type { Knex } from "knex";
import { ACTIVE_STATUSES } from "./status.js";

// Fleet statistics, aggregated by the database from the per-(status, GPU) summary.

export interface FleetStatistics {
  totalInstances: number;
  activeInstances: number;
  destroyedInstances: number;
  totalCost: number;
  averageCostPerHour: number;
  gpuDistribution: Record<string, number>;
  statusDistribution: Record<string, number>;
}

export class StatisticsStore {
  private constructor(private readonly knex: Knex) {}

  static create({ knex }: { knex: Knex }): StatisticsStore {
    return new StatisticsStore(knex);
  }

  /**
   * Fleet statistics: grouping sets give the per-status rows, the per-GPU rows and the grand
   * total together. Cost runs to destroyed_at, or to now for live instances.
   */
  async statistics(): Promise<FleetStatistics> {
    const { rows } = await this.knex.raw<{ rows: StatisticsRow[] }>(STATISTICS_SQL);
    const stats: FleetStatistics = {
      totalInstances: 0,
      activeInstances: 0,
      destroyedInstances: 0,
      totalCost: 0,
      averageCostPerHour: 0,
      gpuDistribution: {},
      statusDistribution: {},
    };
    for (const row of rows) {
      const n = Number(row.n);
      if (row.by_status === 0) {
        stats.statusDistribution[row.status!] = n;
        if ((ACTIVE_STATUSES as readonly string[]).includes(row.status!)) stats.activeInstances += n;
        if (row.status === "destroyed") stats.destroyedInstances = n;
      } else if (row.by_gpu === 0) {
        stats.gpuDistribution[row.gpu_name ?? "unknown"] = n;
      } else {
        stats.totalInstances = n;
        stats.totalCost = Number(row.total_cost ?? 0);
        stats.averageCostPerHour = Number(row.average_cost_per_hour ?? 0);
      }
    }
    return stats;
  }
}

interface StatisticsRow {
  by_status: number;
  by_gpu: number;
  status: string | null;
  gpu_name: string | null;
  n: string;
  total_cost: string | null;
  average_cost_per_hour: string | null;
}

// Reads the trigger-maintained summary (see the gpu_instances migration): a few dozen rows,
// whatever the number of records.
const STATISTICS_SQL = `
  select grouping(status) as by_status, grouping(gpu_name) as by_gpu, status, nullif(gpu_name, '') as gpu_name,
         sum(n) as n,
         (sum(cost_destroyed) + extract(epoch from now()) * sum(live_cost) - sum(cost_created)) / 3600 as total_cost,
         coalesce(sum(sum_cost) / nullif(sum(n), 0), 0) as average_cost_per_hour
  from gpu_instance_stats
  where n <> 0
  group by grouping sets ((status), (gpu_name), ())`;
